"""Scripted replies for ``offline/script`` in tests."""

from __future__ import annotations

from typing import Any


def paced(deltas: list[str], pause: float) -> list[dict[str, Any]]:
    """A text reply streaming these deltas with a pause after each, then finishing."""
    events: list[dict[str, Any]] = [{"type": "text-start", "id": "t"}]
    for delta in deltas:
        events.append({"type": "text-delta", "id": "t", "delta": delta})
        if pause:
            events.append({"type": "sleep", "seconds": pause})
    return [
        *events,
        {"type": "text-end", "id": "t"},
        {"type": "finish-step", "finish_reason": "stop"},
    ]


def words(count: int) -> list[str]:
    return [f"w{i} " for i in range(count)]
