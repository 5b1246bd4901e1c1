"""An MCP server of the tests' own, for what real servers rarely do on purpose: fail, hang, and die mid-call.

``python tests/mcp_faulty_server.py`` serves over stdio; ``--http PORT`` over streamable HTTP on 127.0.0.1;
``--nested-schema DEPTH`` adds a tool whose input schema nests DEPTH objects deep (over stdio at any depth;
``--cut-nested`` leaves its text a brace short, so that the line listing it is not JSON); ``--garbage then-serve``
(or ``then-exit``) writes lines that are not JSON-RPC to stdout first.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
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


#: The nested tool's inputSchema as the SDK writes it over stdio, where each line the server writes has the deep
#: schema's text in its place: the SDK cannot serialize a schema past about 125 levels; a server of another make
#: can.
SPLICE_MARK = '{"type":"object","x-spliced":"nested"}'


def nested_schema_text(depth: int) -> str:
    """The JSON text of an object schema whose property ``inner`` is an object schema, ``depth`` levels deep."""
    return '{"type":"object","properties":{"inner":' * depth + '{"type":"string"}' + "}}" * depth


class SplicingOutput(io.TextIOBase):
    """Standard output with the text of the nested schema in place of :data:`SPLICE_MARK`."""

    def __init__(self, schema_text: str) -> None:
        self.schema_text = schema_text

    def write(self, text: str) -> int:
        return sys.stdout.write(text.replace(SPLICE_MARK, self.schema_text))

    def flush(self) -> None:
        sys.stdout.flush()


def add_nested_tool(schema: dict[str, Any]) -> None:
    """The tool ``nested``, whose ``inputSchema`` is ``schema`` (as a server generating schemas from a recursive
    type might nest it)."""

    @server.tool()
    def nested() -> str:
        """Take a deeply nested payload."""
        return "nested"

    tool = server._tool_manager.get_tool("nested")
    assert tool is not None
    tool.parameters = schema


async def serve_spliced(schema_text: str) -> None:
    """Serve over stdio, writing through :class:`SplicingOutput`."""
    output = anyio.wrap_file(SplicingOutput(schema_text))
    async with stdio_server(stdout=output) as (read_stream, write_stream):
        lowlevel = server._lowlevel_server
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--nested-schema", type=int, metavar="DEPTH", help="add the tool nested, DEPTH deep")
    parser.add_argument("--cut-nested", action="store_true", help="leave the nested schema's text a brace short")
    parser.add_argument(
        "--garbage",
        choices=["then-serve", "then-exit"],
        help="first write lines to stdout that are not JSON-RPC (as a stray print does), then serve or exit",
    )
    arguments = parser.parse_args()
    if arguments.nested_schema is not None:
        text = nested_schema_text(arguments.nested_schema)
        add_nested_tool(json.loads(SPLICE_MARK if arguments.http is None else text))
    if arguments.garbage is not None:
        print("Starting the faulty server...\n{not json", flush=True)
        if arguments.garbage == "then-exit":
            sys.exit(1)
    if arguments.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=arguments.http)
    elif arguments.nested_schema is not None:
        anyio.run(serve_spliced, text[:-1] if arguments.cut_nested else text)
    else:
        server.run()
