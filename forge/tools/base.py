"""The tool contract: what a tool is, what it is given, what it returns.

Register a tool with :func:`forge.tools.tool`::

    @tool(
        name="read_file",
        description="Read a text file from the session's workspace.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}},
                    "required": ["path"], "additionalProperties": False},
    )
    async def read_file(ctx: ToolContext, args: dict) -> ToolResult: ...

The function may be async or sync (a sync one runs in a worker thread). Its
input is validated against ``parameters`` (JSON schema) before the call. It
returns a :class:`ToolResult` (or a plain string, the output), or raises
:class:`ToolError` for a failure the model should see. Any other exception, and
running past the tool's timeout, also end the call as a tool error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT = 30.0  # seconds; settings.FORGE_TOOL_TIMEOUT overrides per call site
# The ``maximum`` of a built-in tool's integer argument that names no smaller one: message
# indexes, line numbers and counts are 32-bit. JSON Schema counts ``1e30`` as an integer,
# so without a maximum it reached the tool (as 10**30, be8abfb) instead of an error.
INT_ARG_MAX = 2**31 - 1


class ToolError(Exception):
    """A failure the model is told about (the tool part ends in ``error``).

    ``metadata`` goes into the tool part's ``state.metadata``.
    """

    def __init__(self, message: str, *, metadata: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.metadata = metadata or {}


@dataclass(frozen=True)
class ToolFile:
    """A file a tool returns (an MCP image, say): the runtime stores it in the session's
    files and logs a ``file`` part for it in the reply."""

    mime: str
    filename: str
    data: bytes


@dataclass(frozen=True)
class ToolResult:
    output: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    files: tuple[ToolFile, ...] = ()


@dataclass
class ToolContext:
    """What a running tool may use. Built by the runtime for each call."""

    session_id: str
    tenant_id: int
    message_id: str
    call_id: str
    agent: str
    workspace: Path  # this session's sandbox directory (created on first use)
    abort: asyncio.Event  # set when the turn is aborted; long tools should watch it
    # Runs a subtask (the ``task`` tool): (agent, prompt, description) -> its result.
    run_subtask: Callable[[str, str, str], Awaitable[ToolResult]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


ToolFunction = Callable[[ToolContext, dict[str, Any]], Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    function: ToolFunction
    timeout: float | None = None  # None: settings.FORGE_TOOL_TIMEOUT
