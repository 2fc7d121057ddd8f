"""Normalization of what is written to the store (the seed's rules), as pure functions.

* a message: a known role, a string text, a time (filled when missing);
* a slice: an id and a creation time (filled when missing); its range clamped
  into the unit (``0 ≤ start ≤ end ≤ len(messages)``); slices ordered by
  creation time; no two slices of a unit overlapping (a later slice starts no
  earlier than where the slices before it end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .exceptions import InvalidInput
from .ids import ID_MAX, is_valid_id, new_memory_session_id, new_slice_id, new_unit_id
from .models import AGENT_MAX, Role
from .times import parse_time

ROLES = frozenset(Role.values)
MESSAGE_TEXT_MAX = 100_000
APPEND_MAX = 200
SUMMARY_MAX = 20_000


@dataclass(frozen=True)
class Msg:
    """One clean dialogue message (its wire shape: ``wire.message_wire``)."""

    role: str
    text: str
    at: datetime
    session_id: str = ""
    message_id: str = ""


def clean_agent(agent: Any) -> str:
    if not isinstance(agent, str) or not agent.strip() or len(agent) > AGENT_MAX:
        raise InvalidInput(f"agent must be a non-empty name of at most {AGENT_MAX} characters")
    return agent.strip()


def clean_time(value: Any, *, where: str, default: datetime) -> datetime:
    if value is None:
        return default
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(f"{where}: a time needs a time zone")
        return parse_time(value.isoformat())
    if isinstance(value, str):
        try:
            return parse_time(value)
        except ValueError:
            raise InvalidInput(f"{where}: {value!r} is not an ISO-8601 time with a zone") from None
    raise InvalidInput(f"{where}: a time must be an ISO-8601 string")


def _optional_id(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if value is None or value == "":
        return ""
    if not is_valid_id(value):
        raise InvalidInput(f"{where}.{key}: not an id of at most {ID_MAX} URL-safe characters")
    return str(value)


def clean_message(raw: Any, *, where: str, now: datetime) -> Msg:
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where}: a message is an object {{role, text, at?}}")
    unknown = set(raw) - {"role", "text", "at", "session_id", "message_id"}
    if unknown:
        raise InvalidInput(f"{where}: unknown fields {sorted(unknown)}")
    role = raw.get("role")
    if role not in ROLES:
        raise InvalidInput(f"{where}.role: must be one of {sorted(ROLES)}, got {role!r}")
    text = raw.get("text", "")
    if not isinstance(text, str):
        raise InvalidInput(f"{where}.text: must be a string")
    if len(text) > MESSAGE_TEXT_MAX:
        raise InvalidInput(f"{where}.text: longer than {MESSAGE_TEXT_MAX} characters")
    if "\x00" in text:
        raise InvalidInput(f"{where}.text: contains a NUL character")
    return Msg(
        role=role,
        text=text,
        at=clean_time(raw.get("at"), where=f"{where}.at", default=now),
        session_id=_optional_id(raw, "session_id", where),
        message_id=_optional_id(raw, "message_id", where),
    )


def clean_messages(raw: Any, *, now: datetime, limit: int | None = APPEND_MAX) -> list[Msg]:
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise InvalidInput("messages must be a list of {role, text, at?} objects")
    if limit is not None and len(raw) > limit:
        raise InvalidInput(f"at most {limit} messages at once")
    return [clean_message(item, where=f"messages[{i}]", now=now) for i, item in enumerate(raw)]


def clean_summary(summary: Any) -> str:
    if not isinstance(summary, str):
        raise InvalidInput("a summary must be a string")
    summary = summary.replace("\x00", "").strip()
    if len(summary) > SUMMARY_MAX:
        summary = summary[: SUMMARY_MAX - 1].rstrip() + "…"
    return summary


def _index(value: Any, *, where: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{where}: must be an integer")
    return value


def normalize_slices(
    slices: Iterable[Any], *, message_count: int, now: datetime
) -> list[dict[str, Any]]:
    """Slices ``{id, start_index, end_index, summary, created_at}`` of a unit holding
    ``message_count`` messages, normalized (see the module's docstring).

    A missing ``start_index`` continues where the slices before end; a missing
    ``end_index`` is the end of the unit. Sorting is by ``(created_at, id)``;
    ids sort in creation order, so slices made in one millisecond keep theirs.
    """
    filled: list[dict[str, Any]] = []
    for i, raw in enumerate(slices):
        where = f"slices[{i}]"
        if not isinstance(raw, Mapping):
            raise InvalidInput(f"{where}: a slice is an object")
        slice_id = raw.get("id") or new_slice_id()
        if not is_valid_id(slice_id):
            raise InvalidInput(f"{where}.id: not an id")
        filled.append(
            {
                "id": slice_id,
                "start_index": _index(
                    raw.get("start_index"), where=f"{where}.start_index", default=-1
                ),
                "end_index": _index(
                    raw.get("end_index"), where=f"{where}.end_index", default=message_count
                ),
                "summary": clean_summary(raw.get("summary", "")),
                "created_at": clean_time(
                    raw.get("created_at"), where=f"{where}.created_at", default=now
                ),
            }
        )
    filled.sort(key=lambda s: (s["created_at"], s["id"]))
    covered = 0  # where the slices so far end
    for item in filled:
        start = covered if item["start_index"] < 0 else item["start_index"]
        start = min(max(start, covered, 0), message_count)
        end = min(max(item["end_index"], start), message_count)
        item["start_index"], item["end_index"] = start, end
        covered = max(covered, end)
    return filled


def normalize_unit(unit: Any, *, now: datetime) -> dict[str, Any]:
    """A unit's wire shape ``{id, memory_session_id, updated_at, conversation_messages,
    slices}``, normalized: ids and times filled, messages cleaned, slices normalized."""
    if not isinstance(unit, Mapping):
        raise InvalidInput("a unit is an object")
    unit_id = unit.get("id") or new_unit_id()
    session_id = unit.get("memory_session_id") or new_memory_session_id()
    for key, value in (("id", unit_id), ("memory_session_id", session_id)):
        if not is_valid_id(value):
            raise InvalidInput(f"unit.{key}: not an id")
    messages = clean_messages(unit.get("conversation_messages", []), now=now, limit=None)
    return {
        "id": unit_id,
        "memory_session_id": session_id,
        "updated_at": clean_time(unit.get("updated_at"), where="unit.updated_at", default=now),
        "conversation_messages": messages,
        "slices": normalize_slices(unit.get("slices", []), message_count=len(messages), now=now),
    }
