"""Regenerated replies: what a newer reply to the same prompt hides from the model.

Regenerating a reply (the AI SDK's ``trigger: "regenerate-message"``) logs a
*new* assistant message whose ``parent_id`` is the same user message; the old
reply stays in the log, append-only. A reply is *superseded* when a newer
assistant message with the same parent exists. The model sees the newest reply
to each prompt only, so a regenerated turn starts from the prompt alone and
later turns continue from the reply the user kept.

Compaction summaries (``summary: true``) are not replies: they are never
superseded and never supersede (``forge.context.compacted`` owns them).
Nothing is removed from the log: superseded replies stay readable through
``/messages/``, the export and the recall tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

Item = TypeVar("Item", bound=Mapping[str, Any])  # {"info": message, "parts": [part, ...]}


def is_reply(info: Mapping[str, Any]) -> bool:
    return (
        info.get("role") == "assistant" and not info.get("summary") and bool(info.get("parent_id"))
    )


def drop_superseded(history: Iterable[Item]) -> list[Item]:
    """``history`` (oldest first) without the replies a newer reply to the same prompt
    superseded. Order is kept."""
    items = list(history)
    newest: dict[str, str] = {}
    for item in items:
        info = item["info"]
        if is_reply(info):
            newest[str(info["parent_id"])] = str(info["id"])  # oldest first: the last wins
    return [
        item
        for item in items
        if not is_reply(item["info"])
        or newest[str(item["info"]["parent_id"])] == str(item["info"]["id"])
    ]
