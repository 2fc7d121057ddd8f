"""A turn in progress: what its steps share."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from forge.tools.base import ToolResult
from sessions.models import Session

from .agents import AgentConfig


@dataclass
class Turn:
    session: Session
    user_message_id: str
    message_id: str  # the assistant message this turn writes
    agent: AgentConfig
    model: str  # provider/model
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    run_subtask: Callable[[str, str, str], Awaitable[ToolResult]] | None = None
    depth: int = 0  # subtask nesting
