"""The memory store's wire shapes (CONTRACT §2), in one place.

core  ``{id, user, agent, memory_session_id, units: [unit ids, oldest first]}``
unit  ``{id, memory_session_id, updated_at, conversation_messages: [{role, text, at}], slices}``
slice ``{id, start_index, end_index, summary, created_at}`` (``end_index`` exclusive)
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
