"""A stdio MCP server written with the SDK's FastMCP, misbehaving on purpose (the tests
of forge.tools.mcp's bad input). ``python misbehaving.py [flag ...]``.

Flags: ``garbage-first`` (a non-JSON line before the handshake), ``exit-at-start``
(exits before serving), ``never-ready`` (sleeps an hour before serving: a start that
times out), ``start-log=PATH`` (appends a line to PATH each time it starts, and offers
a tool ``start_<n>`` on its n-th start: a test sees which start it talks to),
``cancel-log=PATH`` (``sleep`` writes to PATH when its call is cancelled).

Tools: ``echo`` (fine), ``hang`` (never answers), ``sleep`` (answers after a while),
``fail_quoting`` (an ``isError`` answer quoting an env value), ``grow`` (adds a tool
``added`` and says the list changed), ``die`` (exits mid-call),
``big`` (an oversized text), ``big_error`` (an oversized ``isError`` text),
``garbage`` (writes a non-JSON line as its answer, then never answers), ``bad_schema``
(its input schema is not a JSON Schema), ``remote_ref`` (its input schema refers to a
schema at a URL), ``picture`` (a PNG image), ``half_emoji`` (a lone surrogate escape
in its answer), ``latin1`` (an answer that is not UTF-8).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from pathlib import Path

from mcp.server.fastmcp import Context, FastMCP
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
async def sleep(seconds: float) -> str:
    """Answers after ``seconds``; a call cancelled (``notifications/cancelled``) is noted
    in the file of the ``cancel-log=PATH`` flag."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        for flag in sys.argv:
            if flag.startswith("cancel-log="):
                Path(flag.removeprefix("cancel-log=")).write_text(f"cancelled {seconds:g}\n")
        raise
    return f"slept {seconds:g}"


@server.tool()
def fail_quoting(variable: str) -> str:
    """Fails with a message that quotes the environment variable ``variable`` (a server
    quoting its own credential, as a failed login does): FastMCP answers ``isError``."""
    raise ValueError(f"auth failed with token {os.environ.get(variable, '')}")


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds a tool ``added`` and says the tool list changed."""
    server.add_tool(lambda: "added", name="added", description="Added later.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def big_error(size: int) -> str:
    """Fails with a message of ``size`` characters (FastMCP answers ``isError``)."""
    raise ValueError("e" * size)


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


def _answer_raw(ctx: Context, line: bytes) -> None:
    """Write this call's answer as ``line`` (bytes as they are), past FastMCP's writer."""
    sys.stdout.flush()
    head = b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"' % (
        str(ctx.request_id).encode()
    )
    sys.stdout.buffer.write(head + line + b'"}]}}\n')
    sys.stdout.buffer.flush()


@server.tool(structured_output=False)  # (its raw answer has no structured content)
async def half_emoji(ctx: Context) -> str:
    """Answers with a text cut inside a surrogate pair, as a JavaScript server cutting a
    string writes it (a lone surrogate escape), then nothing."""
    _answer_raw(ctx, b"cut \\ud83d")
    await asyncio.sleep(3600)
    return "late"


@server.tool(structured_output=False)  # (its raw answer has no structured content)
async def latin1(ctx: Context) -> str:
    """Answers with a text in Latin-1, not UTF-8 (``caf\\xe9``), then nothing."""
    _answer_raw(ctx, b"caf\xe9")
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


@server.tool()
def remote_ref(x: int) -> str:
    """Its schema refers to a schema elsewhere (below): never fetched, the tool left out."""
    return str(x)


server._tool_manager._tools["remote_ref"].parameters = {
    "type": "object",
    "properties": {"x": {"$ref": "http://192.0.2.1/schema.json"}},
}


def log_start(path: Path) -> int:
    """Count this start in ``path``; the number of starts so far, this one included."""
    with path.open("a") as log:
        log.write(f"{os.getpid()}\n")
    return len(path.read_text().splitlines())


if __name__ == "__main__":
    logs = [flag.removeprefix("start-log=") for flag in sys.argv if flag.startswith("start-log=")]
    if logs:
        count = log_start(Path(logs[0]))
        server.add_tool(lambda: f"start {count}", name=f"start_{count}", description="Which start.")
    if "never-ready" in sys.argv:
        time.sleep(3600)
    if "garbage-first" in sys.argv:
        sys.stdout.write("Welcome to my server! <<not json>>\n")
        sys.stdout.flush()
    if "exit-at-start" in sys.argv:
        sys.exit(2)
    server.run("stdio")
