"""The wire shapes of CONTRACT §2: validation and normalisation.

``normalize_message`` and ``normalize_part`` take what a caller passed to
``update_message`` / ``update_part`` (plus the stored version, if any), and
return the complete dict that goes into the log, or raise ``ShapeError`` with a
message naming the offending field (the services turn it into
``InvalidMessage`` / ``InvalidPart``). They do no I/O.

An update may omit fields: they keep their stored value (a shallow merge), so
the event in the log always holds the whole object.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from .ids import is_valid_id, new_message_id, new_part_id
from .log import canonical_json, format_time, now_ms, parse_time

PART_TYPES = (
    "text",
    "reasoning",
    "tool",
    "file",
    "agent",
    "compaction",
    "subtask",
    "step-start",
    "step-finish",
    "patch",
)
TOOL_STATUSES = ("pending", "awaiting-approval", "running", "completed", "error")
# A call goes forward only: pending, then (when a rule asks) awaiting-approval, then
# running, then completed or error; an answered denial goes from awaiting to error.
_TOOL_RANK = {"pending": 0, "awaiting-approval": 1, "running": 2, "completed": 3, "error": 3}
TOKEN_KEYS = ("input", "output", "reasoning", "cache_read", "cache_write")


class ShapeError(ValueError):
    """Raised by field validators; the caller wraps it into the public exception."""


Validator = Callable[[str, Any], Any]

_REQUIRED = object()  # the field must be given
_OPTIONAL = object()  # the field may be absent and gets no default


def _fail(path: str, expected: str, value: Any) -> ShapeError:
    return ShapeError(f"{path}: expected {expected}, got {type(value).__name__} {value!r:.60}")


def v_str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, "a string", value)
    return value


def v_url(path: str, value: Any) -> str:
    """A file's address: a path on this server (``/…``) or an ``http(s)`` URL; nothing a
    browser would run (``javascript:``, ``data:``) and no other scheme."""
    value = v_str(path, value)
    if not (value.startswith("/") and not value.startswith("//")) and not value.startswith(
        ("http://", "https://")
    ):
        raise ShapeError(f"{path}: expected a path (/…) or an http(s) URL, got {value[:60]!r}")
    return value


def v_opt_str(path: str, value: Any) -> str | None:
    return None if value is None else v_str(path, value)


def v_bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, "true or false", value)
    return value


# The most one event may say a step used: a trillion tokens of a kind, a million in
# cost. Far above any model call; the usage table adds them up in 64-bit integers
# (cost in billionths), where an imported log's 2**63 overflowed, made a tenant's
# budget used up for every member and broke rebuild_usage.
MAX_TOKENS = 10**12
MAX_COST = 10**6


def v_number(path: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, "a finite number", value)
    if value < 0:
        raise ShapeError(f"{path}: must not be negative, got {value}")
    return value


def v_count(path: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(path, "a non-negative integer", value)
    return value


def v_id(path: str, value: Any) -> str:
    if not is_valid_id(value):
        raise _fail(path, "an id of 1-64 characters from [A-Za-z0-9_-]", value)
    return str(value)


def v_opt_id(path: str, value: Any) -> str | None:
    return None if value is None else v_id(path, value)


def v_time(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(path, "an ISO-8601 time string", value)
    try:
        return format_time(parse_time(value))
    except ValueError:
        raise ShapeError(f"{path}: {value!r} is not an ISO-8601 time with a timezone") from None


def v_opt_time(path: str, value: Any) -> str | None:
    return None if value is None else v_time(path, value)


# How deep a free-form object (a tool call's input, its metadata) may nest. Far more
# than any tool's arguments; a 900-deep input was logged (by import), and then every
# reader with a deeper stack of its own (the admin's conversation page) hit Python's
# recursion limit decoding it: a 500 for good.
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests objects and lists deeper than ``limit`` (iterative: no
    recursion of its own)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, Mapping) else item
        if not isinstance(item, Mapping | list | tuple):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def v_object(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "an object", value)
    if too_deep(value):
        raise ShapeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    try:
        canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{path}: not representable as JSON ({exc})") from None
    return dict(value)


def v_str_list(path: str, value: Any) -> list[str]:
    if not isinstance(value, list | tuple):
        raise _fail(path, "a list of strings", value)
    return [v_str(f"{path}[{i}]", item) for i, item in enumerate(value)]


def v_token_count(path: str, value: Any) -> int:
    count = v_count(path, value)
    if count > MAX_TOKENS:
        raise ShapeError(f"{path}: at most {MAX_TOKENS} tokens, got {count}")
    return count


def v_cost(path: str, value: Any) -> int | float:
    cost = v_number(path, value)
    if cost > MAX_COST:
        raise ShapeError(f"{path}: at most {MAX_COST}, got {cost}")
    return cost


def v_tokens(path: str, value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise _fail(path, "an object of token counts", value)
    unknown = set(value) - set(TOKEN_KEYS)
    if unknown:
        raise ShapeError(f"{path}: unknown keys {sorted(unknown)}; allowed: {list(TOKEN_KEYS)}")
    return {key: v_token_count(f"{path}.{key}", value.get(key, 0)) for key in TOKEN_KEYS}


def zero_tokens() -> dict[str, int]:
    return dict.fromkeys(TOKEN_KEYS, 0)


def _record(fields: Mapping[str, tuple[Validator, Any]]) -> Validator:
    """A validator for an object with exactly these fields (unknown keys refused)."""

    def validate(path: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise _fail(path, "an object", value)
        return _validate_fields(path, value, fields)

    return validate


def _validate_fields(
    path: str, value: Mapping[str, Any], fields: Mapping[str, tuple[Validator, Any]]
) -> dict[str, Any]:
    unknown = [key for key in value if key not in fields]
    if unknown:
        raise ShapeError(f"{path}: unknown field(s) {sorted(map(str, unknown))}")
    out: dict[str, Any] = {}
    for name, (validator, default) in fields.items():
        if name in value:
            out[name] = validator(f"{path}.{name}", value[name])
        elif default is _REQUIRED:
            raise ShapeError(f"{path}.{name}: required")
        elif default is _OPTIONAL:
            continue
        else:
            out[name] = default() if callable(default) else default
    return out


def v_model(path: str, value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    return _record({"provider": (v_str, _REQUIRED), "model": (v_str, _REQUIRED)})(path, value)


def v_error(path: str, value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    return _record(
        {
            "name": (v_str, _REQUIRED),
            "message": (v_str, _REQUIRED),
            "retryable": (v_bool, False),
            "status": (v_opt_count, _OPTIONAL),
        }
    )(path, value)


def v_opt_count(path: str, value: Any) -> int | None:
    return None if value is None else v_count(path, value)


# The largest id a user can have: what a 64-bit signed key holds, on every engine. (A
# larger one in an imported log reached SQLite's driver and overflowed it: a 500.)
MAX_USER_ID = 2**63 - 1


def v_user_id(path: str, value: Any) -> int:
    """A user's id (the speaker of a turn): a positive integer a 64-bit key holds."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_USER_ID:
        raise _fail(path, "a user id (a positive integer below 2**63)", value)
    return value


# --- tool state ----------------------------------------------------------------

_TOOL_STATE_FIELDS: dict[str, dict[str, tuple[Validator, Any]]] = {
    "pending": {"input": (v_object, _OPTIONAL), "raw": (v_str, _OPTIONAL)},
    "awaiting-approval": {
        "input": (v_object, _REQUIRED),
        "metadata": (v_object, dict),
        "time": (_record({"start": (v_time, _REQUIRED)}), _REQUIRED),
    },
    "running": {
        "input": (v_object, _REQUIRED),
        "title": (v_str, _OPTIONAL),
        "metadata": (v_object, _OPTIONAL),
        "time": (_record({"start": (v_time, _REQUIRED)}), _REQUIRED),
    },
    "completed": {
        "input": (v_object, _REQUIRED),
        "output": (v_str, _REQUIRED),
        "title": (v_str, ""),
        "metadata": (v_object, dict),
        "time": (
            _record(
                {
                    "start": (v_time, _REQUIRED),
                    "end": (v_time, _REQUIRED),
                    "compacted": (v_opt_time, None),
                }
            ),
            _REQUIRED,
        ),
    },
    "error": {
        "input": (v_object, _REQUIRED),
        "error": (v_str, _REQUIRED),
        "metadata": (v_object, dict),
        "time": (_record({"start": (v_time, _REQUIRED), "end": (v_time, _REQUIRED)}), _REQUIRED),
    },
}


def v_tool_state(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, "an object with a status", value)
    status = value.get("status")
    if status not in _TOOL_STATE_FIELDS:
        raise ShapeError(f"{path}.status: expected one of {list(TOOL_STATUSES)}, got {status!r}")
    rest = {key: item for key, item in value.items() if key != "status"}
    return {"status": status, **_validate_fields(path, rest, _TOOL_STATE_FIELDS[status])}


# --- parts ---------------------------------------------------------------------

_SPAN = _record({"start": (v_opt_time, _OPTIONAL), "end": (v_opt_time, _OPTIONAL)})

PART_FIELDS: dict[str, dict[str, tuple[Validator, Any]]] = {
    "text": {"text": (v_str, _REQUIRED), "synthetic": (v_bool, False), "time": (_SPAN, dict)},
    "reasoning": {"text": (v_str, _REQUIRED), "time": (_SPAN, dict)},
    "tool": {
        "call_id": (v_str, _REQUIRED),
        "tool": (v_str, _REQUIRED),
        "state": (v_tool_state, _REQUIRED),
    },
    "file": {"mime": (v_str, _REQUIRED), "filename": (v_opt_str, None), "url": (v_url, _REQUIRED)},
    "agent": {"name": (v_str, _REQUIRED)},
    "compaction": {
        "auto": (v_bool, _REQUIRED),
        "overflow": (v_bool, False),
        "tail_start_id": (v_opt_id, None),
    },
    "subtask": {
        "prompt": (v_str, _REQUIRED),
        "description": (v_str, ""),
        "agent": (v_str, _REQUIRED),
        "child_session_id": (v_opt_id, None),
    },
    "step-start": {"snapshot": (v_opt_str, None)},
    "step-finish": {
        "reason": (v_str, _REQUIRED),
        "snapshot": (v_opt_str, None),
        "tokens": (v_tokens, zero_tokens),
        "cost": (v_cost, 0),
    },
    "patch": {"hash": (v_str, _REQUIRED), "files": (v_str_list, _REQUIRED)},
}
_PART_COMMON = ("id", "message_id", "session_id", "type")


def normalize_part(
    part: Mapping[str, Any], *, session_id: str, existing: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The complete part to log. Raises ``ShapeError``."""
    if not isinstance(part, Mapping):
        raise _fail("part", "an object", part)
    merged: dict[str, Any] = {**existing, **part} if existing else dict(part)
    part_id = v_id("part.id", merged["id"]) if "id" in merged else new_part_id()
    if merged.get("session_id", session_id) != session_id:
        raise ShapeError(f"part.session_id: {merged['session_id']!r} is not this session")
    if "message_id" not in merged:
        raise ShapeError("part.message_id: required")
    message_id = v_id("part.message_id", merged["message_id"])
    part_type = merged.get("type")
    if part_type not in PART_FIELDS:
        raise ShapeError(f"part.type: expected one of {list(PART_TYPES)}, got {part_type!r}")
    if existing is not None:
        if existing["type"] != part_type:
            raise ShapeError(f"part.type: a {existing['type']} part cannot become {part_type}")
        if existing["message_id"] != message_id:
            raise ShapeError("part.message_id: a part cannot move to another message")
    body = {key: value for key, value in merged.items() if key not in _PART_COMMON}
    fields = _validate_fields("part", body, PART_FIELDS[part_type])
    if part_type == "tool" and existing is not None:
        _check_tool_transition(existing["state"]["status"], fields["state"]["status"])
    return {
        "id": part_id,
        "message_id": message_id,
        "session_id": session_id,
        "type": part_type,
        **fields,
    }


def _check_tool_transition(old: str, new: str) -> None:
    if _TOOL_RANK[new] < _TOOL_RANK[old] or (_TOOL_RANK[old] == 3 and new != old):
        raise ShapeError(f"part.state.status: a tool part cannot go from {old} to {new}")


# --- messages ------------------------------------------------------------------

# ``user_id``: who spoke. On a prompt, the user who sent it; on a reply, the user whose
# prompt (or regeneration) it answers, so the turn's speaker is in the log for every
# process that finishes the turn. Optional, with no default: logs written before it
# existed (and their exports) stay canonical.
_MESSAGE_COMMON: dict[str, tuple[Validator, Any]] = {
    "agent": (v_opt_str, None),
    "model": (v_model, None),
    "user_id": (v_user_id, _OPTIONAL),
}
MESSAGE_FIELDS: dict[str, dict[str, tuple[Validator, Any]]] = {
    "user": dict(_MESSAGE_COMMON),
    "assistant": {
        **_MESSAGE_COMMON,
        "parent_id": (v_opt_id, None),
        "completed_at": (v_opt_time, None),
        "finish": (v_opt_str, None),
        "error": (v_error, None),
        "summary": (v_bool, False),
        "tokens": (v_tokens, zero_tokens),
        "cost": (v_cost, 0),
    },
}
_MESSAGE_HEAD = ("id", "session_id", "role", "created_at")


def normalize_message(
    info: Mapping[str, Any], *, session_id: str, existing: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The complete message ``info`` to log. Raises ``ShapeError``."""
    if not isinstance(info, Mapping):
        raise _fail("info", "an object", info)
    merged: dict[str, Any] = {**existing, **info} if existing else dict(info)
    message_id = v_id("info.id", merged["id"]) if "id" in merged else new_message_id()
    if merged.get("session_id", session_id) != session_id:
        raise ShapeError(f"info.session_id: {merged['session_id']!r} is not this session")
    role = merged.get("role")
    if role not in MESSAGE_FIELDS:
        raise ShapeError(f"info.role: expected 'user' or 'assistant', got {role!r}")
    if existing is not None and existing["role"] != role:
        raise ShapeError(f"info.role: a {existing['role']} message cannot become {role}")
    created_at = (
        v_time("info.created_at", merged["created_at"])
        if "created_at" in merged
        else format_time(now_ms())
    )
    body = {key: value for key, value in merged.items() if key not in _MESSAGE_HEAD}
    fields = _validate_fields("info", body, MESSAGE_FIELDS[role])
    return {
        "id": message_id,
        "session_id": session_id,
        "role": role,
        "created_at": created_at,
        **fields,
    }
