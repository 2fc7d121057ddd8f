"""Summary boundaries: what compaction hides from the model (seed: filterCompacted).

A *boundary* is an assistant message with ``summary: true`` that finished
without error (``completed_at`` set, no ``error``), whose parent user message
carries a ``compaction`` part. A failed, aborted or unfinished summary is no
boundary: it never cuts history.

:func:`filter_compacted` scans the history newest to oldest and stops at the
newest boundary. What stays visible, oldest first:

1. the compaction user message and its summary (the summary stands for
   everything older);
2. the kept tail: the messages from the compaction part's ``tail_start_id`` on
   that are older than the compaction message (the recent turns kept verbatim;
   a turn interrupted by an automatic compaction continues in its own message);
3. every message newer than the boundary.

Nothing is removed from the log: what is hidden here stays readable through
``/messages/`` and the recall tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

Item = TypeVar("Item", bound=Mapping[str, Any])  # {"info": message, "parts": [part, ...]}


def is_finished_summary(info: Mapping[str, Any]) -> bool:
    """A summary that may close a boundary: finished, without error."""
    return bool(
        info.get("role") == "assistant"
        and info.get("summary")
        and info.get("completed_at")
        and not info.get("error")
    )


def compaction_part(parts: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((p for p in parts if p.get("type") == "compaction"), None)


def find_boundary(history: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """``(index of the compaction user message, index of its summary)`` of the newest
    boundary in ``history`` (oldest first), or None."""
    summaries: dict[str, int] = {}  # parent id -> index of its newest finished summary
    for index in range(len(history) - 1, -1, -1):
        info = history[index]["info"]
        if info.get("role") == "assistant":
            if is_finished_summary(info) and info.get("parent_id"):
                summaries.setdefault(str(info["parent_id"]), index)
            continue
        summary_index = summaries.get(str(info.get("id")))
        if summary_index is not None and compaction_part(history[index]["parts"]) is not None:
            return index, summary_index
    return None


def filter_compacted(history: Iterable[Item]) -> list[Item]:
    """The history the model sees: everything before the newest boundary is cut,
    except the kept tail (see the module's docstring). Oldest first."""
    items = list(history)
    found = find_boundary(items)
    if found is None:
        return items
    user_index, summary_index = found
    part = compaction_part(items[user_index]["parts"]) or {}
    tail_start = part.get("tail_start_id")
    tail = (
        [item for item in items[:user_index] if str(item["info"]["id"]) >= str(tail_start)]
        if tail_start
        else []
    )
    newer = [
        item for index, item in enumerate(items) if index > user_index and index != summary_index
    ]
    return [items[user_index], items[summary_index], *tail, *newer]
