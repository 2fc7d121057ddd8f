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

**Other agents' and speakers' turns stay.** Memory is a speaker's with one agent (a
core), and one session may hold turns of several: an ``@explore`` mention, a prompt
naming another agent, another member speaking. The core rolled only its own, so the
cut hides only those: the block's ``rolled_kept`` lists the messages at or before the
cut that are another agent's or speaker's (:func:`is_others`), which stay in view.
Before (a QA finding, HIGH), the cut hid them too: the model lost turns that were in
no summary it was sent, some never rolled at all. The list is written by the runtime
(``forge.runtime.dialogue``), at most :data:`MAX_KEPT` ids: past that many the cut
stops below the next such message (:func:`cut_among`), and what the core rolled after
it is seen raw as well as summarized, never lost. A block without the field keeps
nothing (every session of one agent and speaker: its log is as before).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Mapping
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


def rolled_kept(blocks: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The ids the in-force ``dialog_history`` block keeps in view below its cut (other
    agents' and speakers' messages), or none."""
    block = blocks.get(BLOCK)
    value = block.get("rolled_kept") if block is not None else None
    if not isinstance(value, list):
        return frozenset()
    return frozenset(item for item in value if isinstance(item, str))


def drop_rolled(
    history: Iterable[Item], through: str | None, kept: frozenset[str] = frozenset()
) -> list[Item]:
    """``history`` without the messages whose id is ``<= through`` but those ``kept``
    and the compaction that summarized one of them (:func:`standing_boundaries`), and
    without the compactions the cut passed (:func:`passed_boundaries`); order kept."""
    items = list(history)
    if through is None:
        return items
    passed = passed_boundaries(items, through, kept)
    shown = kept | standing_boundaries(items, kept) if kept else kept
    return [
        item
        for item in items
        if (str(item["info"]["id"]) > through or str(item["info"]["id"]) in shown)
        and str(item["info"]["id"]) not in passed
    ]


def _summarized_below(message_id: str, part: Mapping[str, Any]) -> str:
    """The id below which a compaction (its request ``message_id``) summarized: its kept
    tail's first message, or with none its request."""
    tail = part.get("tail_start_id")
    return str(tail) if tail else message_id


def standing_boundaries(history: Iterable[Mapping[str, Any]], kept: frozenset[str]) -> set[str]:
    """The ids of the compaction messages (the request and its summary) that summarized
    a message the cut keeps in view (``kept``): they stay in view with it, whatever the
    cut (the block does not hold that message; hiding the compaction's summary lost it,
    a review finding). The core's turns it summarized are then seen twice."""
    items = list(history)
    standing = {
        str(item["info"]["id"])
        for item in items
        for part in item["parts"]
        if part.get("type") == "compaction"
        and any(other < _summarized_below(str(item["info"]["id"]), part) for other in kept)
    }
    return _with_summaries(items, standing)


def _with_summaries(items: list[Mapping[str, Any]], requests: set[str]) -> set[str]:
    """``requests`` (compaction messages' ids) and the ids of their summaries."""
    if not requests:
        return requests
    return requests | {
        str(item["info"]["id"])
        for item in items
        if item["info"].get("summary") and str(item["info"].get("parent_id")) in requests
    }


# The most ids a block keeps in view below its cut (``rolled_kept``): the block is logged
# again with each rolling, so the list is bounded.
MAX_KEPT = 200


def is_others(info: Mapping[str, Any], *, agent: str, user_id: Any) -> bool:
    """Whether a message is another agent's or another speaker's than the core's
    (``agent``, ``user_id``): it names a different one. A compaction's summary is
    nobody's (its request, a user message, is: the cut hides it only when it passed
    its boundary)."""
    if info.get("summary"):
        return False
    speaker = info.get("user_id")
    if speaker is not None and str(speaker) != str(user_id):
        return True
    named = info.get("agent")
    return bool(named) and named != agent


def cut_among(
    infos: Iterable[Mapping[str, Any]],
    *,
    start: str | None,
    through: str,
    kept: Iterable[str],
    agent: str,
    user_id: Any,
    limit: int = MAX_KEPT,
    is_other: Callable[[Mapping[str, Any]], bool] | None = None,
) -> tuple[str | None, list[str]]:
    """``(cut, kept)`` for a core that rolled the session through ``through``: ``infos``
    are the session's messages above ``start`` (the cut already in force, whose ``kept``
    stand) and at most ``through``, oldest first. Every one of them that is another
    agent's or speaker's is kept in view; when ``limit`` would be passed, the cut stops
    just below the next such message instead. ``is_other``: how a message is told
    another's (default :func:`is_others` of the core's agent and speaker)."""
    kept = [item for item in kept if start is not None and item <= start]
    last = start
    for info in infos:
        message_id = str(info["id"])
        other = (
            is_other(info)
            if is_other is not None
            else is_others(info, agent=agent, user_id=user_id)
        )
        if other:
            # A reply of another speaker to a prompt the core rolled (another member
            # regenerated it) keeps that prompt in view too: no answer without its
            # question (the prompt is then seen raw and summarized).
            parent = info.get("parent_id")
            asked = (
                [str(parent)]
                if info.get("role") == "assistant"
                and isinstance(parent, str)
                and parent < message_id
                and parent not in kept
                else []
            )
            if len(kept) + len(asked) + 1 > limit:  # this one, and its prompt
                return last, kept
            for item in (*asked, message_id):
                bisect.insort(kept, item)
        last = message_id
    return through, kept


def passed_boundaries(
    history: Iterable[Mapping[str, Any]], through: str, kept: frozenset[str] = frozenset()
) -> set[str]:
    """The ids of the compaction messages (the request and its summary) whose summarized
    turns the rolled cut ``through`` holds: its kept tail starts at or before the cut, or
    (no tail kept) the cut is past the request. Their ids are newer than the turns they
    summarize, so the cut by id kept them, and a turn rolled after a compaction reached
    the model twice, in the compaction's summary and in the block's (QA).

    A compaction that summarized a message the cut keeps in view (``kept``: another
    agent's or speaker's) is never passed (:func:`standing_boundaries`)."""
    items = list(history)
    passed: set[str] = set()
    for item in items:
        message_id = str(item["info"]["id"])
        for part in item["parts"]:
            if part.get("type") != "compaction":
                continue
            if any(other < _summarized_below(message_id, part) for other in kept):
                continue
            tail = part.get("tail_start_id")
            if (tail and str(tail) <= through) or message_id <= through:
                passed.add(message_id)
    return _with_summaries(items, passed)
