"""The memory store's wire shapes (CONTRACT §2), in one place.

core  ``{id, user, agent, memory_session_id, units: [unit ids, oldest first]}``
unit  ``{id, memory_session_id, updated_at, conversation_messages: [{role, text, at}], slices}``
slice ``{id, start_index, end_index, summary, created_at}`` (``end_index`` exclusive)
hit   ``{slice, unit_id, core_id, agent, rank, messages: [{index, role, at, snippet}]}``
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .times import format_time


def core_wire(core: MemoryCore, unit_ids: Iterable[str]) -> dict[str, Any]:
    return {
        "id": core.pk,
        "user": core.user.get_username(),
        "agent": core.agent,
        "memory_session_id": core.memory_session_id,
        "units": list(unit_ids),
    }


def message_wire(message: MemoryMessage | DialogueMessage) -> dict[str, Any]:
    return {"role": message.role, "text": message.text, "at": format_time(message.at)}


def slice_wire(item: MemorySlice) -> dict[str, Any]:
    return {
        "id": item.pk,
        "start_index": item.start_index,
        "end_index": item.end_index,
        "summary": item.summary,
        "created_at": format_time(item.created_at),
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
    item: MemorySlice, rank: int, messages: Iterable[tuple[MemoryMessage, str]]
) -> dict[str, Any]:
    """A search hit: the slice (with ``unit`` and ``unit.core`` loaded), its rank (1 =
    best; never a score), and its best-matching messages, best first."""
    return {
        "slice": slice_wire(item),
        "unit_id": item.unit_id,
        "core_id": item.unit.core_id,
        "agent": item.unit.core.agent,
        "rank": rank,
        "messages": [message_hit_wire(message, snippet) for message, snippet in messages],
    }
