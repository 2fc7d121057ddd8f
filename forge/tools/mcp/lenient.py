"""The MCP transport's messages on their way to the SDK's session (:func:`relay`), read
leniently: a server's answer with half a character in it is the answer, not a dropped
message (:func:`_parsed_leniently`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import anyio
import pydantic
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types as mcp_types
from mcp.shared.message import SessionMessage

from forge.providers import events as ev


async def relay(
    source: MemoryObjectReceiveStream[SessionMessage | Exception],
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    closed: asyncio.Event,
) -> None:
    """Pass the transport's messages to the session; at the transport's end, close the
    session's stream (it fails the requests in flight) and set ``closed``."""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async with sink:
            async for message in source:
                await sink.send(_parsed_leniently(message))
    closed.set()


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return ev.without_surrogates(value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def _parsed_leniently(message: SessionMessage | Exception) -> SessionMessage | Exception:
    """A message the transport could not parse as JSON, parsed by Python's JSON with each
    lone surrogate escape (``"\\ud83d"``: half an emoji, as a JavaScript server cutting a
    string writes it) as U+FFFD. The SDK's parser refuses such an escape, and the answer
    was dropped: the call waited for ``FORGE_TOOL_TIMEOUT``, failed as a timeout, and its
    server was restarted (QA). Anything else is passed on as it is."""
    if not isinstance(message, pydantic.ValidationError):
        return message
    errors = message.errors()
    if len(errors) != 1 or errors[0].get("type") != "json_invalid":
        return message
    raw = errors[0].get("input")
    if not isinstance(raw, str | bytes):
        return message
    try:
        value = json.loads(raw)
        return SessionMessage(mcp_types.JSONRPCMessage.model_validate(_without_surrogates(value)))
    except (ValueError, RecursionError):
        return message
