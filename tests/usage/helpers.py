"""Replies written through the store's write services, as the runtime writes them."""

from __future__ import annotations

from typing import Any

from sessions import services
from sessions.log import format_time, now_ms


def now() -> str:
    return format_time(now_ms())


def reply(
    session: Any,
    *,
    steps: list[dict[str, Any]],
    tools: int = 0,
    error: dict[str, Any] | None = None,
    user_id: int | None = None,
    created_at: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A user prompt and a reply with these steps (``{"tokens", "cost"}`` each) and tool
    calls, then its completion; returns the reply's (open, completed) infos as logged."""
    speaker = user_id or session.user_id
    asked = services.update_message(
        session=session, info={"role": "user", "user_id": speaker}
    ).data["id"]
    info: dict[str, Any] = {
        "role": "assistant",
        "parent_id": asked,
        "agent": "build",
        "model": {"provider": "offline", "model": "echo"},
        "user_id": speaker,
    }
    if created_at:
        info["created_at"] = created_at
    opened = services.update_message(session=session, info=info).data
    for i in range(tools):
        start = now()
        services.update_part(
            session=session,
            part={
                "message_id": opened["id"],
                "type": "tool",
                "call_id": f"call_{i}",
                "tool": "read_file",
                "state": {
                    "status": "completed",
                    "input": {"path": "x"},
                    "output": "x",
                    "time": {"start": start, "end": now()},
                },
            },
        )
    for one in steps:
        services.update_part(
            session=session,
            part={
                "message_id": opened["id"],
                "type": "step-finish",
                "reason": "stop",
                "tokens": one["tokens"],
                "cost": one["cost"],
            },
        )
    final: dict[str, Any] = {"id": opened["id"], "completed_at": now(), "finish": "stop"}
    if error:
        final["error"] = error
    done = services.update_message(session=session, info=final).data
    return opened, done
