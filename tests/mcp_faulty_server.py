"""An MCP server of the tests' own, for what real servers rarely do on purpose: fail, hang, and die mid-call.

``python tests/mcp_faulty_server.py`` serves over stdio; ``--http PORT`` over streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
from typing import Annotated

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    arguments = parser.parse_args()
    if arguments.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=arguments.http)
