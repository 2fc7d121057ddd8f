"""Rolled turns: what long-term memory's ``dialog_history`` block hides from the model.

When DialogRolling has rolled turns of a session into the speaker's memory, the
turn's ``dialog_history`` block (logged by ``context.updated``, see
``forge.runtime.dialogue.memory_blocks``) carries ``rolled_through``: the id of
the newest message of this session that the block's core has rolled. The
summaries in the block stand *in place of* those turns (seed 记忆存储: rolling
trims the chat messages), so the model must not also see them raw.

:func:`drop_rolled` is that cut: every history message whose id is ``<=``
``rolled_through`` is hidden. It runs **after** ``filter_compacted`` (the
compaction boundary), on the history it left, so compaction and rolling
compose: either may cut first and the other then sees the shorter history (a
compaction summarizes only what the cut left; a rolling that holds all a
compaction summarized hides the compaction's messages too:
:func:`passed_boundaries`). Message ids sort by creation
(``sessions.ids``), so the cut is a prefix of the session by id.

The cut is a projection rule like the others: nothing leaves the log (the chat
page, ``/messages/``, the export and the recall tools ``history_search`` /
``history_read`` still show every turn), and because it is read from a logged
block, ``context/?at=`` and ``replay_session`` reproduce it exactly. A block
without ``rolled_through`` (logged before it existed) or with ``None`` cuts
nothing; so does the block's removal (the next speaker has no memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

Item = TypeVar("Item", bound=Mapping[str, Any])  # {"info": message, "parts": [part, ...]}

BLOCK = "dialog_history:memory"  # forge.context.blocks.block_key of memory's block

# The ids the store generates (``accounts.ids``): a prefix and 26 Crockford base32
# characters. Between two of them, Python's order is the database's whatever its
# collation; an id of another shape (an imported log's) is never ordered by the
# database on Python's behalf.
GENERATED_ID = re.compile(r"[a-z]+_[0-9A-HJKMNP-TV-Z]{26}")


def is_generated(value: object) -> bool:
    return isinstance(value, str) and GENERATED_ID.fullmatch(value) is not None


def rolled_through(blocks: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The id the in-force ``dialog_history`` block says its core rolled the session
    through (``blocks``: the folded context blocks, by key), or None."""
    block = blocks.get(BLOCK)
    value = block.get("rolled_through") if block is not None else None
    return value if isinstance(value, str) and value else None


def drop_rolled(history: Iterable[Item], through: str | None) -> list[Item]:
    """``history`` without the messages whose id is ``<= through``, and without the
    compactions the cut passed (:func:`passed_boundaries`); order kept."""
    items = list(history)
    if through is None:
        return items
    passed = passed_boundaries(items, through)
    return [
        item
        for item in items
        if str(item["info"]["id"]) > through and str(item["info"]["id"]) not in passed
    ]


def passed_boundaries(history: Iterable[Mapping[str, Any]], through: str) -> set[str]:
    """The ids of the compaction messages (the request and its summary) whose summarized
    turns the rolled cut ``through`` holds: its kept tail starts at or before the cut, or
    (no tail kept) the cut is past the request. Their ids are newer than the turns they
    summarize, so the cut by id kept them, and a turn rolled after a compaction reached
    the model twice, in the compaction's summary and in the block's (QA)."""
    items = list(history)
    passed: set[str] = set()
    for item in items:
        message_id = str(item["info"]["id"])
        for part in item["parts"]:
            if part.get("type") != "compaction":
                continue
            tail = part.get("tail_start_id")
            if (tail and str(tail) <= through) or message_id <= through:
                passed.add(message_id)
    if passed:
        passed.update(
            str(item["info"]["id"])
            for item in items
            if item["info"].get("summary") and str(item["info"].get("parent_id")) in passed
        )
    return passed
