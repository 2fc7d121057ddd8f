"""The shapes of the events that project to no rows: ``context.updated`` (the context
blocks) and ``session.compacted`` (a compaction's marker). Checked on every append
(``services.writes.AppendEvent``) and on import (``services.transfer``) alike; the
other events' shapes are in :mod:`sessions.shapes`.

They were free-form objects; an imported log could then carry ``{"blocks": null}`` or a
marker whose ids are lists, and the session's every later request failed on it (the
fold, the compaction plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .shapes import (
    _OPTIONAL,
    _REQUIRED,
    ShapeError,
    _fail,
    _record,
    v_bool,
    v_id,
    v_number,
    v_opt_id,
    v_str,
)


def _v_mapping(path: str, value: Any) -> Mapping[str, Any]:
    """An object, not copied nor encoded: the event's data is encoded whole when it is
    appended (canonical JSON, for its hash), which refuses what JSON cannot hold; here
    only the shape is checked (``v_object`` encodes each object it checks: three times
    over for a tools block, ~160 µs a prompt)."""
    if not isinstance(value, Mapping):
        raise _fail(path, "an object", value)
    return value


_TOOL_SPEC = _record(
    {
        "name": (v_str, _REQUIRED),
        "description": (v_str, _REQUIRED),
        "parameters": (_v_mapping, _REQUIRED),
    }
)


def _v_opt_number(path: str, value: Any) -> int | float | None:
    return None if value is None else v_number(path, value)


def _check_block(path: str, value: Any) -> None:
    """A context block ``{"kind", "key"?, ...}``: ``kind`` a non-empty string, ``key`` a
    string, ``removed`` a boolean, ``text`` a string (whatever the kind: it reaches the
    model as system text); the kinds the runtime reads typed further: ``tools`` a list of
    ``{name, description, parameters}``, ``settings``' ``model`` a string and
    ``temperature`` a number (either may be null). Other fields are the block's own."""
    block = _v_mapping(path, value)
    kind = block.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _fail(f"{path}.kind", "a non-empty string", kind)
    if "key" in block:
        v_str(f"{path}.key", block["key"])
    if "removed" in block:
        v_bool(f"{path}.removed", block["removed"])
    if "text" in block:
        v_str(f"{path}.text", block["text"])
    if block.get("removed"):
        return
    if kind == "tools":
        tools = block.get("tools", [])
        if not isinstance(tools, list):
            raise _fail(f"{path}.tools", "a list of tools", tools)
        for i, spec in enumerate(tools):
            _TOOL_SPEC(f"{path}.tools[{i}]", spec)
    elif kind == "settings":
        if block.get("model") is not None:
            v_str(f"{path}.model", block["model"])
        _v_opt_number(f"{path}.temperature", block.get("temperature"))


def check_context_update(data: Any) -> None:
    """``context.updated``'s data: exactly ``{"blocks": [block, ...]}`` (:func:`_check_block`).
    Raises ``ShapeError``."""
    fields = _v_mapping("data", data)
    if set(fields) != {"blocks"}:
        raise ShapeError(
            f"data: expected exactly the field 'blocks', got {sorted(map(str, fields))}"
        )
    blocks = fields["blocks"]
    if not isinstance(blocks, list):
        raise _fail("data.blocks", "a list of blocks", blocks)
    for i, block in enumerate(blocks):
        _check_block(f"data.blocks[{i}]", block)


_COMPACTION_MARKER = _record(
    {
        "message_id": (v_id, _REQUIRED),
        "parent_id": (v_id, _REQUIRED),
        "tail_start_id": (v_opt_id, _OPTIONAL),
        "auto": (v_bool, _OPTIONAL),
    }
)


def check_compaction_marker(data: Any) -> None:
    """``session.compacted``'s data: ``{message_id, parent_id, tail_start_id?, auto?}``
    (the summary message, the prompt it answers, where the kept tail starts). Raises
    ``ShapeError``."""
    _COMPACTION_MARKER("data", data)


def check_free_event(type: str, data: Any) -> None:
    """The data of an event that projects to no rows, by its type. Raises ``ShapeError``."""
    if type == "context.updated":
        check_context_update(data)
    elif type == "session.compacted":
        check_compaction_marker(data)
