"""What the model is sent, and an export, read the same on SQLite and PostgreSQL.

SQLite stores an event's data as canonical JSON (keys sorted) and reads the objects
back in that order; PostgreSQL's ``jsonb`` keeps an object's keys in an order of its
own (shorter keys first). A tool call's ``arguments`` and the tools' schemas are
serialized from such objects, so the same exported log replayed on the two engines
gave two different requests, and an import re-exported with its keys moved (QA).
Both follow the canonical order now, whatever the engine.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from forge.context import request_for
from forge.context.blocks import set_block
from forge.context.incremental import cache, full_request, request_bytes
from sessions import services
from sessions.selectors import export_lines

pytestmark = pytest.mark.django_db

DONE = "2026-12-06T00:00:01.000Z"
# Declared in the order a tool's author writes them, which is neither sorted nor jsonb's.
PARAMETERS = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
INPUT = {"path": "big.txt", "content": "hi", "mode": {"zeta": 1, "alpha": 2}}
ARGUMENTS = '{"content": "hi", "mode": {"alpha": 2, "zeta": 1}, "path": "big.txt"}'


def _log_a_tool_call(session: Any) -> None:
    set_block(
        session,
        kind="tools",
        key="agent",
        body={"tools": [{"name": "write_file", "description": "d", "parameters": PARAMETERS}]},
    )
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(session=session, part={"message_id": user, "type": "text", "text": "go"})
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user}
    ).data["id"]
    services.update_part(session=session, part={"message_id": reply, "type": "step-start"})
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "tool",
            "call_id": "c1",
            "tool": "write_file",
            "state": {
                "status": "completed",
                "input": INPUT,
                "output": "written",
                "title": "",
                "metadata": {},
                "time": {"start": DONE, "end": DONE},
            },
        },
    )


def _keys_in_order(value: Any) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(_keys_in_order(v) for v in value.values())
    if isinstance(value, list):
        return all(_keys_in_order(v) for v in value)
    return True


def test_a_requests_tool_arguments_and_schemas_are_in_canonical_key_order(session):
    _log_a_tool_call(session)
    cache.clear()
    for _, request in (full_request(session), request_for(session), request_for(session)):
        call = request.messages[1]["tool_calls"][0]
        assert call["function"]["arguments"] == ARGUMENTS
        (spec,) = request.tools
        assert list(spec.parameters["properties"]) == ["content", "path"]
        assert _keys_in_order(spec.parameters)
    assert request_bytes(request_for(session)) == request_bytes(full_request(session))


def test_an_export_writes_each_events_data_in_canonical_key_order(session):
    _log_a_tool_call(session)
    lines = list(export_lines(session=session))
    events = [json.loads(line) for line in lines[1:]]
    assert all(_keys_in_order(event["data"]) for event in events)
    assert any('"input":{"content":"hi","mode":{"alpha":2,"zeta":1},"path":"big.txt"}' in line
               for line in lines)  # fmt: skip
