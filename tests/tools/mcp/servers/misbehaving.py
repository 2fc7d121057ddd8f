"""A stdio MCP server written with the SDK's FastMCP, misbehaving on purpose (the tests
of forge.tools.mcp's bad input). ``python misbehaving.py [garbage-first]``.

Tools: ``echo`` (fine), ``hang`` (never answers), ``die`` (exits mid-call),
``big`` (an oversized text), ``garbage`` (writes a non-JSON line as its answer,
then never answers), ``bad_schema`` (its input schema is not a JSON Schema),
``picture`` (a PNG image).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.utilities.types import Image

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)

server = FastMCP("misbehaving")


@server.tool()
def echo(text: str) -> str:
    """Say it back."""
    return f"echo: {text}"


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def die() -> str:
    """Exits in the middle of the call."""
    os._exit(3)


@server.tool()
def big(size: int) -> str:
    """``size`` characters of text."""
    return "x" * size


@server.tool()
async def garbage() -> str:
    """Answers with a line that is not JSON, then nothing."""
    sys.stdout.write("this is not JSON-RPC {{{\n")
    sys.stdout.flush()
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def bad_schema(x: int) -> str:
    """Its schema is broken below."""
    return str(x)


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=PNG, format="png")


server._tool_manager._tools["bad_schema"].parameters = {
    "type": "object",
    "properties": {"x": {"type": "not-a-type"}},
}

if __name__ == "__main__":
    if "garbage-first" in sys.argv:
        sys.stdout.write("Welcome to my server! <<not json>>\n")
        sys.stdout.flush()
    if "exit-at-start" in sys.argv:
        sys.exit(2)
    server.run("stdio")
