"""The views: the readings of a conversation's log, and the only code besides the core that tells one event
from another.

- what the person sees: :mod:`.person` (the projection every surface renders);
- what the agent saw: :mod:`.agent` (each message sent and its reply);
- where calls and turns begin: :mod:`.calls` (what replay and evaluation cut a log into);
- what the driver answered: :mod:`.answers` (every input the core was given, which replay feeds back);
- where a person was asked to decide: :mod:`.points` (what rules for whether to ask are tried at);
- what waits for a person across conversations: :mod:`.inbox` (the inbox's cards and read model).

Each is a pure function of the log, and can be fed a log as it grows.
"""
