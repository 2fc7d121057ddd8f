"""The memory store's wire shapes (CONTRACT §2), in one place.

core  ``{id, user, agent, memory_session_id, units: [unit ids, oldest first]}``
unit  ``{id, memory_session_id, updated_at, conversation_messages: [{role, text, at}], slices}``
slice ``{id, start_index, end_index, summary, created_at}`` (``end_index`` exclusive)
hit   ``{slice, unit_id, core_id, agent, rank, messages: [{index, role, at, snippet}]}``
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .times import format_time

# Every dict of these shapes is made here, whoever holds the data: a row of the store, a
# message being cleaned (``normalize.Msg``), one the compressor merged, a slice the rolling
# is committing. Callers pass values; they never build the dicts themselves.


class MessageLike(Protocol):
    """A dialogue message: a unit's or the window's row, or ``normalize.Msg``."""

    @property
    def role(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def at(self) -> datetime: ...


def core_wire(core: MemoryCore, unit_ids: Iterable[str]) -> dict[str, Any]:
    return {
        "id": core.pk,
        "user": core.user.get_username(),
        "agent": core.agent,
        "memory_session_id": core.memory_session_id,
        "units": list(unit_ids),
    }


def message_fields(*, role: str, text: str, at: datetime) -> dict[str, Any]:
    """``{role, text, at}`` from its values (the compressor's merged text, say)."""
    return {"role": role, "text": text, "at": format_time(at)}


def message_wire(message: MessageLike) -> dict[str, Any]:
    """``{role, text, at}``: a unit's ``conversation_messages`` item."""
    return message_fields(role=message.role, text=message.text, at=message.at)


def indexed_message_wire(message: MemoryMessage) -> dict[str, Any]:
    """``{role, text, at, index}``: a unit's message with its place in the unit."""
    return {**message_wire(message), "index": message.index}


def window_message_wire(message: DialogueMessage) -> dict[str, Any]:
    """``{role, text, at, seq}``: a message of a core's dialogue window."""
    return {**message_wire(message), "seq": message.seq}


def slice_fields(
    *, slice_id: str, start_index: int, end_index: int, summary: str, created_at: datetime
) -> dict[str, Any]:
    """``{id, start_index, end_index, summary, created_at}`` from its values (a slice the
    rolling is committing: no row read back)."""
    return {
        "id": slice_id,
        "start_index": start_index,
        "end_index": end_index,
        "summary": summary,
        "created_at": format_time(created_at),
    }


def slice_wire(item: MemorySlice) -> dict[str, Any]:
    return slice_fields(
        slice_id=item.pk,
        start_index=item.start_index,
        end_index=item.end_index,
        summary=item.summary,
        created_at=item.created_at,
    )


BLOCK_KIND = "dialog_history"
BLOCK_KEY = "memory"


def history_line(item: MemorySlice) -> str:
    """A slice in the ``dialog_history`` block's text: ``[created_at] summary``."""
    return f"[{format_time(item.created_at)}] {item.summary}"


def history_digest_line(core: MemoryCore) -> str | None:
    """The core's history digest in the ``dialog_history`` block's text (None without one):
    ``[until <newest condensed slice's time>] Older dialogue, condensed:`` and the digest
    on the lines below."""
    if not core.history_digest:
        return None
    until = format_time(core.history_digest_at) if core.history_digest_at else "?"
    return f"[until {until}] {HISTORY_DIGEST_HEAD}\n{core.history_digest}"


HISTORY_DIGEST_HEAD = "Older dialogue, condensed:"
HISTORY_HEAD = "Summaries of the earlier dialogue, oldest first:"
# The block holds the newest slices only: the model is told that there is more, and where.
HISTORY_HEAD_OLDER = (
    "Summaries of the earlier dialogue, oldest first. Older dialogue is not summarized "
    "here: search long-term memory for it."
)


def history_block_wire(
    *,
    core: MemoryCore,
    unit: MemoryUnit,
    oldest_first: Sequence[MemorySlice],
    older: bool = False,
) -> dict[str, Any]:
    """The ``dialog_history`` context block of ``core``: its history digest, if any, then
    these slices of ``unit`` (``selectors.dialog_history_block`` chooses them);
    ``older``: the core holds slices older than these that the digest does not hold
    either, which its text says."""
    digest = history_digest_line(core)
    lines = [history_line(item) for item in oldest_first]
    head = HISTORY_HEAD_OLDER if older else HISTORY_HEAD
    return {
        "kind": BLOCK_KIND,
        "key": BLOCK_KEY,
        "text": "\n\n".join([head, *([digest] if digest else []), *lines]),
        "core_id": core.pk,
        "unit_id": unit.pk,
        "memory_session_id": unit.memory_session_id,
        "slice_ids": [item.pk for item in oldest_first],
        "digest_at": (
            format_time(core.history_digest_at) if digest and core.history_digest_at else None
        ),
        "updated_at": format_time(unit.updated_at),
    }


def unit_page_wire(
    unit: MemoryUnit,
    messages: Iterable[MemoryMessage],
    slices: Iterable[MemorySlice],
    *,
    offset: int,
    next_url: str | None,
) -> dict[str, Any]:
    """A unit with a page of its messages (``GET /api/memory/units/{id}/``): the unit's
    shape whose ``conversation_messages`` start at ``offset``, with ``message_count`` (the
    whole unit's), ``offset`` and ``next`` (the following page's URL, or None). Slice
    indexes are over the whole unit."""
    return {
        **unit_wire(unit, messages, slices),
        "message_count": unit.message_count,
        "offset": offset,
        "next": next_url,
    }


def unit_wire(
    unit: MemoryUnit, messages: Iterable[MemoryMessage], slices: Iterable[MemorySlice]
) -> dict[str, Any]:
    return {
        "id": unit.pk,
        "memory_session_id": unit.memory_session_id,
        "updated_at": format_time(unit.updated_at),
        "conversation_messages": [message_wire(m) for m in messages],
        "slices": [slice_wire(s) for s in slices],
    }


def message_hit_wire(message: MemoryMessage, snippet: str) -> dict[str, Any]:
    """A best-matching message of a search hit: ``index`` is its place in the unit (what
    ``memory_read {unit_id, start, end}`` takes), ``snippet`` a piece around the match."""
    return {
        "index": message.index,
        "role": message.role,
        "at": format_time(message.at),
        "snippet": snippet,
    }


def hit_wire(
    item: MemorySlice,
    rank: int,
    messages: Iterable[tuple[MemoryMessage, str]],
    *,
    by_words: bool = True,
) -> dict[str, Any]:
    """A search hit: the slice (with ``unit`` and ``unit.core`` loaded), its rank (1 =
    best; never a score), its best-matching messages, best first, and ``matched``:
    ``"words"`` when the full text matched it, ``"meaning"`` when only the dense ranking
    found it (which may be unrelated: a search always returns its nearest slices)."""
    return {
        "slice": slice_wire(item),
        "unit_id": item.unit_id,
        "core_id": item.unit.core_id,
        "agent": item.unit.core.agent,
        "rank": rank,
        "matched": "words" if by_words else "meaning",
        "messages": [message_hit_wire(message, snippet) for message, snippet in messages],
    }
