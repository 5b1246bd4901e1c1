"""An MCP server of the tests' own that honours idempotency keys, as a server that deduplicates calls does.

``python tests/mcp_keyed_server.py --db FILE`` serves over stdio (``--http PORT``: over streamable HTTP on
127.0.0.1) and keeps everything in the SQLite file ``FILE``:

- ``calls``: each ``tools/call`` that reached a tool, with the ``_meta`` keys it carried, the idempotency key (or
  ``NULL``) and whether the answer was the stored one (``replayed``);
- ``effects``: each effect a tool had (an email sent, an account charged, a note logged), with its key;
- ``answers``: the answer given for each key, so that a call repeated with the same key gets it again.

``send_email`` and ``charge`` are keyed: the first call with a key has its effect and its answer stored in one
transaction; a later call with that key gets the stored answer and has no effect; a key used before for another
call (another tool or other arguments) is refused. ``charge`` fails (``isError``) for an amount that is not
positive, and that failure is stored by key too. ``log_note`` is not keyed: it has its effect on every call.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

#: Where the client puts the idempotency key in the request's ``_meta`` (``adapters.mcp.IDEMPOTENCY_KEY``).
KEY = "dev.dial-runtime/idempotency-key"

SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY, tool TEXT NOT NULL, key TEXT, meta_keys TEXT NOT NULL, replayed INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY, tool TEXT NOT NULL, key TEXT, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY, tool TEXT NOT NULL, arguments TEXT NOT NULL, answer TEXT NOT NULL
);
"""

server = MCPServer("keyed", instructions="Sends emails and charges accounts, once per idempotency key.")
database = ""


class Refused(Exception):
    """What a tool answers with ``isError``: the text is the answer's."""


def connect() -> sqlite3.Connection:
    """A connection of this call's own (tools run on worker threads), in autocommit: transactions are explicit."""
    connection = sqlite3.connect(database, isolation_level=None, timeout=30)
    connection.executescript(SCHEMA)
    return connection


def request_meta(ctx: Context) -> dict[str, Any]:
    """The ``_meta`` of the request being served (empty when it carried none)."""
    return dict(ctx.request_context.meta or {})


def record_call(connection: sqlite3.Connection, tool: str, meta: dict[str, Any], *, replayed: bool) -> None:
    connection.execute(
        "INSERT INTO calls (tool, key, meta_keys, replayed) VALUES (?, ?, ?, ?)",
        (tool, meta.get(KEY), json.dumps(sorted(meta)), int(replayed)),
    )


def refusal(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def answer_of(act: Callable[[], dict[str, Any]]) -> CallToolResult:
    """What ``act`` gives as a tool result: its value as structured content, or ``isError`` with its refusal."""
    try:
        value = act()
    except Refused as refused:
        return refusal(str(refused))
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(value))], structured_content=value)


def keyed(
    ctx: Context, tool: str, arguments: dict[str, Any], act: Callable[[sqlite3.Connection], dict[str, Any]]
) -> CallToolResult:
    """Run ``act`` (which has the effect, on the connection) once per key: the call, its effect and its answer
    commit together, so a key is either unseen (nothing happened) or answered (its effect and its answer kept)."""
    meta = request_meta(ctx)
    key = meta.get(KEY)
    connection = connect()
    try:
        connection.execute("BEGIN IMMEDIATE")
        # With no key, ``key = NULL`` matches no row: the call is new.
        stored = connection.execute("SELECT tool, arguments, answer FROM answers WHERE key = ?", (key,)).fetchone()
        record_call(connection, tool, meta, replayed=stored is not None)
        if stored is not None:
            if (stored[0], json.loads(stored[1])) != (tool, arguments):
                result = refusal(f"the idempotency key {key!r} was used for another call")
            else:
                result = CallToolResult.model_validate_json(stored[2])
        else:
            result = answer_of(lambda: act(connection))
            if key is not None:
                connection.execute(
                    "INSERT INTO answers (key, tool, arguments, answer) VALUES (?, ?, ?, ?)",
                    (key, tool, json.dumps(arguments), result.model_dump_json(by_alias=True, exclude_none=True)),
                )
        connection.execute("COMMIT")
        return result
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    finally:
        connection.close()


def effect(connection: sqlite3.Connection, ctx: Context, tool: str, detail: dict[str, Any]) -> int:
    """Record one effect of ``tool``; its sequence number, which a second effect would not share."""
    key = request_meta(ctx).get(KEY)
    cursor = connection.execute(
        "INSERT INTO effects (tool, key, detail) VALUES (?, ?, ?)", (tool, key, json.dumps(detail))
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
def send_email(to: str, subject: str, ctx: Context) -> CallToolResult:
    """Send an email (once per idempotency key)."""
    arguments = {"to": to, "subject": subject}

    def send(connection: sqlite3.Connection) -> dict[str, Any]:
        return {"message_id": effect(connection, ctx, "send_email", arguments), "to": to}

    return keyed(ctx, "send_email", arguments, send)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def charge(account: str, cents: int, ctx: Context) -> CallToolResult:
    """Charge an account (once per idempotency key); an amount that is not positive is refused."""
    arguments = {"account": account, "cents": cents}

    def debit(connection: sqlite3.Connection) -> dict[str, Any]:
        if cents <= 0:
            raise Refused(f"cannot charge {cents} cents: the amount must be positive")
        return {"charge_id": effect(connection, ctx, "charge", arguments), "cents": cents}

    return keyed(ctx, "charge", arguments, debit)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def log_note(text: str, ctx: Context) -> dict[str, int]:
    """Log a note; not keyed: every call logs it again, whatever key it carries."""
    connection = connect()
    try:
        with connection:  # one transaction: the call and its effect
            connection.execute("BEGIN IMMEDIATE")
            record_call(connection, "log_note", request_meta(ctx), replayed=False)
            note = effect(connection, ctx, "log_note", {"text": text})
    finally:
        connection.close()
    return {"note": note}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True, metavar="FILE", help="the SQLite file it keeps")
    parser.add_argument("--http", type=int, metavar="PORT")
    arguments = parser.parse_args()
    database = arguments.db
    connect().close()
    if arguments.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=arguments.http)
