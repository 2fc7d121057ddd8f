"""Tests of forge.tools; helpers shared by the test modules."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from forge.tools import ToolContext, ToolResult, execute, prepare_call


def make_context(workspace: Path, **overrides: Any) -> ToolContext:
    values: dict[str, Any] = {
        "session_id": "ses_TEST",
        "tenant_id": 1,
        "message_id": "msg_TEST",
        "call_id": "call_1",
        "agent": "build",
        "workspace": workspace,
        "abort": asyncio.Event(),
    }
    values.update(overrides)
    return ToolContext(**values)


async def call(name: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run a registered tool the way the runtime does: prepare (validate), then execute."""
    tool, parsed = prepare_call(name, json.dumps(args))
    return await execute(tool, parsed, ctx)
