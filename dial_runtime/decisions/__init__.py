"""Decisions from anywhere: signed single-use links (:mod:`.links`, :mod:`.linking`), notifications by e-mail,
webhook or chat (:mod:`.notify`), who is told of each card (:mod:`.announce`), and deadlines, reminders and
escalations that fire with nobody connected (:mod:`.deadlines`, on Procrastinate with the ``postgres`` extra),
and the inbox of every card waiting across a store's conversations (:mod:`.inbox`)."""
