"""An MCP server of the tests' own, for what real servers rarely do on purpose: fail, hang, and die mid-call.

``python tests/mcp_faulty_server.py`` serves over stdio; ``--http PORT`` over streamable HTTP on 127.0.0.1;
``--nested-schema DEPTH`` adds a tool whose input schema nests DEPTH objects deep; ``--garbage then-serve`` (or
``then-exit``) writes lines that are not JSON-RPC to stdout first.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

server = MCPServer("faulty")


@server.tool(title="Echo", annotations=ToolAnnotations(read_only_hint=True))
def echo(text: Annotated[str, Field(max_length=20)]) -> str:
    """Say the text back."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers; the sum is structured content."""
    return {"sum": a + b}


@server.tool()
def boom() -> str:
    """Raise, always."""
    raise ValueError("the boom tool always fails")


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def die() -> str:
    """End the server's process in the middle of the call."""
    os._exit(3)


def nested_schema(depth: int) -> dict[str, Any]:
    """An object schema whose property ``inner`` is an object schema, ``depth`` levels deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"inner": schema}}
    return schema


def add_nested_tool(depth: int) -> None:
    """The tool ``nested``, whose ``inputSchema`` nests ``depth`` levels (as a server generating schemas from a
    recursive type might)."""

    @server.tool()
    def nested() -> str:
        """Take a deeply nested payload."""
        return "nested"

    tool = server._tool_manager.get_tool("nested")
    assert tool is not None
    tool.parameters = nested_schema(depth)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--nested-schema", type=int, metavar="DEPTH", help="add the tool nested, DEPTH deep")
    parser.add_argument(
        "--garbage",
        choices=["then-serve", "then-exit"],
        help="first write lines to stdout that are not JSON-RPC (as a stray print does), then serve or exit",
    )
    arguments = parser.parse_args()
    if arguments.nested_schema is not None:
        add_nested_tool(arguments.nested_schema)
    if arguments.garbage is not None:
        print("Starting the faulty server...\n{not json", flush=True)
        if arguments.garbage == "then-exit":
            sys.exit(1)
    if arguments.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=arguments.http)
