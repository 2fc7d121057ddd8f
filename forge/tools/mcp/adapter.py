"""MCP tools as Forge tools: ``<server>_<tool>``, the server's JSON Schema checked like
any tool's, the call run on the server's connection with ``FORGE_TOOL_TIMEOUT``.

Results: text content is the output; image, audio and embedded resources become
:class:`~forge.tools.base.ToolFile` s (the runtime stores them in the session's
files and logs a ``file`` part for each), named in the output so the model knows
of them. ``structuredContent`` alone (no content) is the output as JSON. A result
with ``isError`` is a tool error carrying its text.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import mimetypes
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp import types as mcp_types
from mcp.shared.exceptions import McpError

from ..base import Tool, ToolContext, ToolError, ToolFile, ToolResult
from ..registry import check_name, check_parameters, get_tool, reference_elsewhere
from . import connection as conn
from .spec import McpSpecError, ServerSpec, masked_text, parse_server

logger = logging.getLogger(__name__)


def start_timeout() -> float:
    """``FORGE_MCP_START_TIMEOUT``: seconds a server has to start, initialize and list
    its tools, stopping it when it does not included (30)."""
    from django.conf import settings

    return float(getattr(settings, "FORGE_MCP_START_TIMEOUT", 30.0) or 30.0)


def retry_seconds() -> float:
    """``FORGE_MCP_RETRY_SECONDS``: seconds after a server failed to start during which
    it is reported unavailable at once instead of started again (60; 0: every time)."""
    from django.conf import settings

    return max(0.0, float(getattr(settings, "FORGE_MCP_RETRY_SECONDS", 60.0)))


MAX_SCHEMA_BYTES = 65_536  # of one MCP tool's input schema, as JSON in UTF-8


@dataclass
class Listing:
    """The MCP tools of an agent's servers, and why any server's tools are missing."""

    tools: list[Tool] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)  # server -> reason (no secrets)
    # tool -> why it is left out while its server's other tools are in (a name taken)
    left_out: dict[str, str] = field(default_factory=dict)


def _decode(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ToolError(f"the MCP server sent invalid base64 data ({exc})") from None


def _filename(stem: str, index: int, mime: str, uri: str = "") -> str:
    if uri:
        # The name its path ends with: not its query or fragment (a signed URL's
        # signature), nor ``..`` (QA: ``report.txt?sig=…`` was the logged name).
        path = urllib.parse.urlsplit(uri).path
        tail = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1])
        if "." in tail.strip(".") and tail.isprintable():
            return tail[:120]
    mime = (mime or "").split(";")[0].strip().lower()
    ext = mimetypes.guess_extension(mime) or _EXTENSIONS.get(mime, ".bin")
    return f"{stem}-{index}{ext}"


# Media types an MCP server sends that Python's table has no extension for (QA: a WAV
# was stored as ``.bin``).
_EXTENSIONS = {
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "audio/x-flac": ".flac",
    "audio/webm": ".weba",
    "audio/mp4": ".m4a",
    "audio/aac": ".aac",
    "image/webp": ".webp",
}


def convert(server_tool: str, result: mcp_types.CallToolResult) -> ToolResult:
    """A call's result as a :class:`ToolResult` (or :class:`ToolError` for ``isError``)."""
    texts: list[str] = []
    files: list[ToolFile] = []
    for index, item in enumerate(result.content, start=1):
        if isinstance(item, mcp_types.TextContent):
            texts.append(item.text)
        elif isinstance(item, mcp_types.ImageContent | mcp_types.AudioContent):
            name = _filename(server_tool, index, item.mimeType)
            files.append(ToolFile(mime=item.mimeType, filename=name, data=_decode(item.data)))
        elif isinstance(item, mcp_types.EmbeddedResource):
            res = item.resource
            mime = res.mimeType or "application/octet-stream"
            name = _filename(server_tool, index, mime, str(res.uri))
            if isinstance(res, mcp_types.TextResourceContents):
                files.append(ToolFile(mime=mime, filename=name, data=res.text.encode()))
            else:
                files.append(ToolFile(mime=mime, filename=name, data=_decode(res.blob)))
        elif isinstance(item, mcp_types.ResourceLink):
            texts.append(f"[resource: {item.uri}]")
    if not texts and result.structuredContent is not None:
        texts.append(json.dumps(result.structuredContent))
    if result.isError:
        # An error is its text: its files are not kept, so not named either (QA: the
        # model was told of a file no part held).
        output = "\n".join(texts)
        raise ToolError(output or "the MCP tool reported an error", metadata={"mcp": True})
    for file in files:
        texts.append(f"[file: {file.filename} ({file.mime}, {len(file.data)} bytes)]")
    output = "\n".join(texts)
    return ToolResult(output=output, metadata={"mcp_server_tool": server_tool}, files=tuple(files))


def _function(spec: ServerSpec, tool: str) -> Any:
    async def call(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        from django.conf import settings

        limit = float(getattr(settings, "FORGE_TOOL_TIMEOUT", 30.0) or 30.0)
        connection = conn.connection(spec)
        try:
            stopped = ctx.abort.is_set  # (read on the MCP loop: a flag, set before the cancel)
            result = await conn.run(connection.call(tool, args, limit, retry_seconds(), stopped))
        except conn.ServerDown as exc:
            raise ToolError(f"MCP server {spec.name!r}: {exc}", metadata={"mcp": True}) from None
        except McpError as exc:
            raise ToolError(
                f"MCP server {spec.name!r}: {masked_text(exc.error.message, spec)}",
                metadata={"mcp": True},
            ) from None
        except Exception as exc:
            # Anything else the SDK raised (a result it could not parse: pydantic's text
            # repeats the server's answer, which may quote its env or headers; QA, HIGH):
            # its first line, masked, as a failed start's reason.
            raise ToolError(
                f"MCP server {spec.name!r}: {conn.reason(exc, spec)}", metadata={"mcp": True}
            ) from None
        try:
            return convert(f"{spec.name}_{tool}", result)
        except ToolError as exc:
            # An ``isError`` answer: the server's own words, which may quote its secrets
            # (FastMCP answers every exception so; QA), masked as a JSON-RPC error's are.
            raise ToolError(masked_text(exc.message, spec), metadata=exc.metadata) from None
        except Exception as exc:
            raise ToolError(
                f"MCP server {spec.name!r}: {conn.reason(exc, spec)}", metadata={"mcp": True}
            ) from None

    call.__qualname__ = f"mcp.{spec.name}.{tool}.<locals>"  # never merged with another
    return call


def adapt(spec: ServerSpec, item: mcp_types.Tool) -> Tool | None:
    """The Forge tool for one MCP tool; None (logged) when its name or schema is unusable."""
    adapted = adapted_or_why(spec, item)
    return adapted if isinstance(adapted, Tool) else None


def adapted_or_why(spec: ServerSpec, item: mcp_types.Tool) -> Tool | str:
    """The Forge tool for one MCP tool, or why it is left out (logged): its name or
    schema is unusable."""
    name = f"{spec.name}_{item.name}"
    try:
        check_name(name)
        schema = dict(item.inputSchema or {"type": "object"})
        check_parameters(name, schema)
        size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > MAX_SCHEMA_BYTES:
            # The tools block goes to the model with every request (QA: a 3 MB one did).
            raise ValueError(
                f"tool {name!r}: its input schema is {size:,} bytes, over {MAX_SCHEMA_BYTES:,}"
            )
        # The SDK validates a result against the output schema: with the default
        # resolver, a remote reference there would be fetched too (on the MCP loop).
        elsewhere = reference_elsewhere(item.outputSchema)
        if elsewhere is not None:
            raise ValueError(
                f"tool {name!r}: its output schema refers to a schema elsewhere "
                f"({elsewhere[:200]!r})"
            )
    except ValueError as exc:
        logger.warning("MCP tool left out: %s", exc)
        return str(exc)
    return Tool(
        name=name,
        description=(item.description or item.title or "")[:2000],
        parameters=schema,
        function=_function(spec, item.name),
    )


async def _list_one(spec: ServerSpec, timeout: float, retry: float) -> list[mcp_types.Tool]:
    connection = conn.connection(spec)
    await connection.start(timeout, retry)
    return await connection.current_tools(timeout)


async def _list_all(specs: list[ServerSpec], timeout: float, retry: float) -> list[Any]:
    listed = (_list_one(s, timeout, retry) for s in specs)
    return await asyncio.gather(*listed, return_exceptions=True)


def will_wait(servers: Mapping[str, Any] | None) -> bool:
    """Whether :func:`list_tools` of these servers may wait for a server to start: one is
    not running and did not fail to start within :func:`retry_seconds` (a bad spec
    waits for nothing). A hint read without the connections' locks: the runtime lists
    such servers off its database thread first, where a slow start held up every
    session of the process (QA)."""
    retry = retry_seconds()
    for name, raw in (servers or {}).items():
        try:
            spec = parse_server(name, raw)
        except McpSpecError:
            continue
        found = conn.existing(spec)
        if found is None or not found.settled(retry):
            return True
    return False


def list_tools(servers: Mapping[str, Any] | None) -> Listing:
    """The tools of these servers (an ``mcpServers`` value), starting any not running.

    Blocking (call it from a thread, not a running loop); waits at most about
    :func:`start_timeout`, the servers starting side by side. A server whose spec is
    bad, that fails to start, or lists nothing usable is left out, with its reason in
    ``failures``: the reason never holds its env or header values. A server that
    failed to start less than :func:`retry_seconds` ago is left out at once with the
    same reason (so a prompt's turn, listing again, does not wait for it twice).
    """
    listing, specs = _parsed(servers)
    if not specs:
        return listing
    timeout = start_timeout()
    results = conn.submit(_list_all(specs, timeout, retry_seconds())).result(timeout + 10)
    return _listed(listing, specs, results)


async def alist_tools(servers: Mapping[str, Any] | None) -> Listing:
    """:func:`list_tools` from a running event loop: awaited on the MCP loop, holding no
    thread meanwhile (the runtime starts an agent's servers so, before a prompt's
    database work: ``runner``)."""
    listing, specs = _parsed(servers)
    if not specs:
        return listing
    timeout = start_timeout()
    async with asyncio.timeout(timeout + 10):
        results = await conn.run(_list_all(specs, timeout, retry_seconds()))
    return _listed(listing, specs, results)


def _parsed(servers: Mapping[str, Any] | None) -> tuple[Listing, list[ServerSpec]]:
    listing = Listing()
    specs: list[ServerSpec] = []
    for name, raw in (servers or {}).items():
        try:
            specs.append(parse_server(name, raw))
        except McpSpecError as exc:
            listing.failures[str(name)] = str(exc)
    return listing, specs


def _listed(listing: Listing, specs: list[ServerSpec], results: list[Any]) -> Listing:
    for spec, result in zip(specs, results, strict=True):
        if isinstance(result, BaseException):
            reason = (
                str(result) if isinstance(result, conn.ServerDown) else conn.reason(result, spec)
            )
            logger.warning("MCP server %r left out: %s", spec.name, reason)
            listing.failures[spec.name] = f"failed to start: {reason}"
            continue
        adapted = []
        for item in result:
            tool = adapted_or_why(spec, item)
            if isinstance(tool, Tool):
                adapted.append(tool)
            else:  # the model is told, as of a tool whose name a built-in has
                listing.left_out[_shown_name(spec, item)] = f"server {spec.name!r}: {tool}"
        if result and not adapted:
            listing.failures[spec.name] = "none of its tools has a usable name and schema"
        listing.tools.extend(_not_taken(spec, adapted, listing))
    listing.tools.sort(key=lambda t: t.name)
    return listing


def _shown_name(spec: ServerSpec, item: mcp_types.Tool) -> str:
    """A left-out tool's full name as the notice shows it: a server's bad name may be
    long or hold anything, so printable and cut."""
    name = f"{spec.name}_{item.name}"
    return name if name.isprintable() and len(name) <= 80 else repr(name[:80])


def _not_taken(spec: ServerSpec, tools: list[Tool], listing: Listing) -> list[Tool]:
    """``tools`` but those whose full name is a built-in tool's (``history`` + ``read`` is
    ``history_read``): such a tool would stand in for the built-in, unannounced, and get
    past the agent's allow-list (MCP tools are always allowed). Each left out is logged
    and named in ``listing.left_out``, which the agent's ``mcp`` notice shows. (Two
    servers' tools never share a name: a server's name holds no ``_``.)"""
    kept = []
    for tool in tools:
        if get_tool(tool.name) is None:
            kept.append(tool)
            continue
        why = f"server {spec.name!r}: a built-in tool has that name"
        logger.warning("MCP tool %s left out: %s", tool.name, why)
        listing.left_out[tool.name] = why
    return kept
