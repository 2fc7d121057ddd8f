"""Asking: the action a call of a turn gets, and when a question asked now expires."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings

from sessions.log import format_time, now_ms

from .rules import decide


def approval_action(agent: Any, tool: str, args: dict[str, Any]) -> str:
    """allow, ask or deny: the agent's rules first, then ``FORGE_TOOL_APPROVAL``."""
    return decide(tool, args, agent.tool_approval, settings.FORGE_TOOL_APPROVAL)


def approval_expiry() -> str:
    """When a call asked about now expires (``FORGE_APPROVAL_TIMEOUT`` from now)."""
    return format_time(now_ms() + timedelta(seconds=float(settings.FORGE_APPROVAL_TIMEOUT)))
