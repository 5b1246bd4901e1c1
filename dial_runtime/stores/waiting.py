"""The inbox's read model in SQL: the query the SQLite and PostgreSQL stores run on the table ``dial_waiting``,
where they keep each conversation's waiting cards beside its log (see :mod:`dial_runtime.views.inbox`).
"""

from __future__ import annotations

import msgspec

from ..views.inbox import WaitingQuery

__all__ = ["query_sql"]


def _member(value: str) -> str:
    """The text that is in a :func:`~dial_runtime.views.inbox.members` text exactly when ``value`` is one of its
    names."""
    return "," + msgspec.json.encode(value).decode() + ","


def query_sql(query: WaitingQuery, placeholder: str, position: str) -> tuple[str, list[object]]:
    """The ``SELECT`` of ``conversation_id, card`` for ``query`` and its parameters, with ``placeholder`` for each
    (``?`` for SQLite, ``%s`` for psycopg) and ``position`` the function that finds a text in another, case
    sensitive (``instr`` for SQLite, whose ``LIKE`` ignores case; ``strpos`` for PostgreSQL)."""
    where: list[str] = []
    params: list[object] = []
    if query.conversation is not None:
        where.append(f"conversation_id = {placeholder}")
        params.append(query.conversation)
    if query.action is not None:
        where.append(f"action = {placeholder}")
        params.append(query.action)
    if query.overdue_at is not None:
        where.append(f"deadline < {placeholder}")
        params.append(query.overdue_at)
    if query.roles is not None:
        either = ["roles = ''"]
        for role in query.roles:
            either.append(f"{position}(roles, {placeholder}) > 0")
            params.append(_member(role))
        where.append("(" + " OR ".join(either) + ")")
    if query.not_approved_by is not None:
        where.append(f"{position}(approvers, {placeholder}) = 0")
        params.append(_member(query.not_approved_by))
    sql = "SELECT conversation_id, card FROM dial_waiting"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY deadline IS NULL, deadline, since, conversation_id, subject_id"
    if query.limit is not None:
        sql += f" LIMIT {placeholder}"
        params.append(query.limit)
    return sql, params
