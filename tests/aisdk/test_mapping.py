"""The mapping from Forge's frames to UI message stream chunks: on real turns read
through the route's stream (text, reasoning, tools, abort, provider error), on their
logged events replayed, and on hand-made sequences (every other part type, a crashed
and recovered reply, snapshots, overlaps and duplicates)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.aisdk import chunks
from forge.aisdk.chunks import ReplyChunks
from forge.aisdk.views import reply_stream
from forge.realtime import hub
from forge.runtime import abort_turn, start_turn
from forge.runtime.finalize import INTERRUPTED
from sessions import selectors
from sessions.frames import event_frame

from .ui import UIMessage, check, expected_parts, parse_sse

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def fold(message_id: str, frames: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], UIMessage]:
    reply = ReplyChunks(message_id)
    out = reply.begin()
    for frame in frames:
        out += reply.accept(frame)
    ui = UIMessage()
    for chunk in out:
        ui.apply(chunk)
    return out, ui


async def recorded_turn(
    session: Any, text: str, *, abort_after: str | None = None
) -> tuple[str, list[dict[str, Any]], UIMessage, dict[str, Any], list[dict[str, Any]]]:
    """A real turn, read through the route's own stream (``reply_stream``: the log, the
    snapshots, the live frames, each gap repaired), and the durable events it logged.

    Returns ``(message id, chunks, the client's message, the stored message, events)``."""
    head = await database_sync_to_async(selectors.head_seq)(
        tenant=session.tenant, session_id=session.pk
    )
    started = await start_turn(session=session, text=text)
    out: list[dict[str, Any]] = []
    ui = UIMessage()
    aborted = False
    async with (
        asyncio.timeout(30),
        hub.subscribe(session.pk) as subscriber,
    ):
        async for raw in reply_stream(session, started.assistant_message_id, head, subscriber):
            for chunk in parse_sse(raw.decode()):
                if chunk == "[DONE]":
                    continue
                assert isinstance(chunk, dict)
                out.append(chunk)
                ui.apply(chunk)
                if (
                    abort_after is not None
                    and not aborted
                    and chunk["type"] == "text-delta"
                    and abort_after in ui.parts[-1]["text"]
                ):
                    aborted = True
                    await abort_turn(session=session)
    assert raw == chunks.DONE
    stored = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    events = await database_sync_to_async(selectors.events_after)(
        tenant=session.tenant, session_id=session.pk, after=head, limit=1000
    )
    frames = [event_frame(event) for event in events]
    return started.assistant_message_id, out, ui, stored, frames


def types(out: list[dict[str, Any]]) -> list[str]:
    """Chunk types with runs of deltas collapsed."""
    collapsed: list[str] = []
    for chunk in out:
        if chunk["type"].endswith("-delta") and collapsed and collapsed[-1] == chunk["type"]:
            continue
        collapsed.append(chunk["type"])
    return collapsed


async def test_text_and_reasoning(session, agents):
    message_id, out, ui, stored, _ = await recorded_turn(session, "one two three")
    assert types(out) == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "text-start",
        "text-delta",
        "text-end",
        "data-step-finish",
        "finish-step",
        "message-metadata",
        "finish",
    ]
    assert out[0] == {"type": "start", "messageId": message_id}
    assert out[-1] == {"type": "finish", "finishReason": "stop"}
    assert ui.id == message_id
    assert ui.parts == expected_parts(stored)  # trailing white space never shown
    assert ui.metadata["tokens"] == stored["info"]["tokens"]
    text_parts = [p for p in stored["parts"] if p["type"] == "text"]
    assert [c["id"] for c in out if c["type"] == "text-start"] == [text_parts[0]["id"]]


async def test_a_tool_call_that_succeeds(session, agents):
    _message_id, out, ui, stored, _ = await recorded_turn(session, "/tool list_files {}")
    tool = next(p for p in stored["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "completed"
    assert [c["type"] for c in out if c["type"].startswith("tool-")] == [
        "tool-input-start",
        "tool-input-available",
        "tool-output-available",
    ]
    assert types(out).count("start-step") == 2  # the call, then the step reporting it
    assert ui.parts == expected_parts(stored)
    assert ui.finish_reason == "stop"


async def test_a_tool_call_that_fails(session, agents):
    _message_id, out, ui, stored, _ = await recorded_turn(session, "/tool no_such_tool {}")
    tool = next(p for p in stored["parts"] if p["type"] == "tool")
    assert tool["state"]["status"] == "error"
    assert [c["type"] for c in out if c["type"].startswith("tool-")] == [
        "tool-input-start",
        "tool-input-available",
        "tool-output-error",
    ]
    error = next(c for c in out if c["type"] == "tool-output-error")
    assert error["errorText"] == tool["state"]["error"]
    assert ui.parts == expected_parts(stored)


async def test_an_aborted_reply_ends_with_abort(session, agents, script):
    events: list[dict[str, Any]] = [{"type": "text-start", "id": "t"}]
    for i in range(200):
        events += [
            {"type": "text-delta", "id": "t", "delta": f"w{i} "},
            {"type": "sleep", "seconds": 0.01},
        ]
    script([[*events, {"type": "text-end", "id": "t"}, {"type": "finish-step"}]])
    _message_id, out, ui, stored, _ = await recorded_turn(session, "go", abort_after="w3")
    assert stored["info"]["error"]["name"] == "MessageAbortedError"
    assert out[-1] == {"type": "abort"}
    assert "finish" not in types(out)
    assert "error" not in types(out)
    assert ui.end == "abort"
    assert ui.parts == expected_parts(stored)  # what streamed, as the log kept it


async def test_a_provider_error_ends_with_error(session, agents, script):
    script(
        [
            [
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "half an ans"},
                {"type": "error", "name": "APIError", "message": "the model fell over"},
            ]
        ]
    )
    _message_id, out, ui, stored, _ = await recorded_turn(session, "go")
    assert out[-2:] == [
        {"type": "error", "errorText": "APIError: the model fell over"},
        {"type": "finish", "finishReason": "error"},
    ]
    assert ui.parts == expected_parts(stored)
    assert ui.parts[-1] == {"type": "text", "text": "half an ans"}


async def test_a_replay_from_the_log_alone_gives_the_same_message(session, agents):
    """A resumed stream may read the durable events only (no deltas): the same message;
    and events seen twice add nothing."""
    message_id, _, live, stored, events = await recorded_turn(session, "/tool list_files {}")
    replay_out, replayed = fold(message_id, events)
    assert replayed.parts == live.parts == expected_parts(stored)
    doubled_out, _ = fold(message_id, events + events)
    assert doubled_out == replay_out


# --- hand-made sequences ------------------------------------------------------------------

M = "msg_1"


def event(seq: int, type_: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "event", "seq": seq, "id": f"e{seq}", "session_id": "s", "type": type_,
            "at": "2026-01-01T00:00:00.000Z", "data": data}  # fmt: skip


def part(seq: int, **fields: Any) -> dict[str, Any]:
    return event(seq, "part.updated", {"message_id": M, "session_id": "s", **fields})


def done(seq: int, **fields: Any) -> dict[str, Any]:
    info = {"id": M, "role": "assistant", "completed_at": "2026-01-01T00:00:01.000Z", **fields}
    return event(seq, "message.updated", info)


def delta(part_id: str, offset: int, text: str) -> dict[str, Any]:
    return {"kind": "delta", "type": "part.delta", "session_id": "s", "message_id": M,
            "part_id": part_id, "field": "text", "offset": offset, "delta": text}  # fmt: skip


def snapshot(part_id: str, text: str) -> dict[str, Any]:
    return {"kind": "snapshot", "type": "part.snapshot", "session_id": "s", "message_id": M,
            "part_id": part_id, "field": "text", "text": text}  # fmt: skip


def test_every_other_part_type_is_a_data_part_or_a_file():
    frames = [
        part(1, id="p1", type="agent", name="explore"),
        part(2, id="p2", type="file", mime="image/png", filename="a.png", url="/files/a.png"),
        part(3, id="p3", type="patch", hash="abc", files=["a.txt"]),
        part(
            4,
            id="p4",
            type="subtask",
            prompt="look",
            description="d",
            agent="explore",
            child_session_id=None,
        ),
        part(
            5,
            id="p4",
            type="subtask",
            prompt="look",
            description="d",
            agent="explore",
            child_session_id="ses_child",
        ),
        event(
            6,
            "part.updated",
            {
                "id": "p5",
                "message_id": "other",
                "session_id": "s",
                "type": "compaction",
                "auto": True,
                "overflow": True,
                "tail_start_id": "m0",
            },
        ),
        event(
            7,
            "part.updated",
            {
                "id": "p6",
                "message_id": "other",
                "session_id": "s",
                "type": "text",
                "text": "not ours",
                "time": {"start": "x"},
            },
        ),
        done(8, finish="length", tokens={"input": 1}, cost=0.5),
    ]
    out, ui = fold(M, frames)
    for chunk in out:
        check(chunk)
    assert [c["type"] for c in out] == [
        "start",
        "data-agent",
        "file",
        "data-patch",
        "data-subtask",
        "data-subtask",
        "data-compaction",
        "message-metadata",
        "finish",
    ]
    assert out[2] == {"type": "file", "url": "/files/a.png", "mediaType": "image/png"}
    assert ui.parts[3] == {  # the subtask replaced in place (same id)
        "type": "data-subtask",
        "id": "p4",
        "data": {
            "prompt": "look",
            "description": "d",
            "agent": "explore",
            "child_session_id": "ses_child",
        },
    }
    assert out[-1] == {"type": "finish", "finishReason": "length"}


@pytest.mark.parametrize(
    ("forge", "ai"),
    [
        ("stop", "stop"),
        ("tool-calls", "tool-calls"),
        ("step-limit", "other"),
        (None, "other"),
        ("unknown", "other"),
        ("content-filter", "content-filter"),
    ],
)
def test_finish_reasons_are_only_ones_every_version_accepts(forge, ai):
    assert chunks.finish(forge) == {"type": "finish", "finishReason": ai}


def test_a_crashed_and_recovered_reply_is_an_error_not_an_abort():
    frames = [
        part(1, id="t1", type="text", text="", time={"start": "a"}),
        delta("t1", 0, "so far "),
        part(2, id="c1", type="tool", call_id="call_1", tool="bash", state={"status": "pending"}),
        part(3, id="t1", type="text", text="so far", time={"start": "a", "end": "b"}),
        part(
            4,
            id="c1",
            type="tool",
            call_id="call_1",
            tool="bash",
            state={
                "status": "error",
                "input": {},
                "error": INTERRUPTED,
                "metadata": {"interrupted": True},
                "time": {"start": "a", "end": "b"},
            },
        ),
        done(5, error={"name": "MessageAbortedError", "message": INTERRUPTED, "retryable": False}),
    ]
    out, ui = fold(M, frames)
    assert [c["type"] for c in out][-3:] == ["message-metadata", "error", "finish"]
    assert out[-2]["errorText"] == f"MessageAbortedError: {INTERRUPTED}"
    assert ui.parts == [
        {"type": "text", "text": "so far"},
        {
            "type": "tool-bash",
            "toolCallId": "call_1",
            "state": "output-error",
            "input": {},
            "errorText": INTERRUPTED,
        },
    ]


def test_a_user_abort_is_abort():
    info = {"name": "MessageAbortedError", "message": chunks.ABORTED, "retryable": False}
    out, _ui = fold(M, [done(1, error=info)])
    assert [c["type"] for c in out] == ["start", "abort"]


def test_snapshots_and_overlapping_deltas_send_each_character_once():
    frames = [
        part(1, id="r1", type="reasoning", text="", time={"start": "a"}),
        snapshot("r1", "abc"),
        delta("r1", 0, "ab"),  # covered
        delta("r1", 2, "cde "),  # overlaps: only "de" is new, the space is held back
        delta("r1", 9, "zzz"),  # a hole: skipped (the stream repairs it with a snapshot)
        snapshot("r1", "abcde  fg"),
        part(2, id="r1", type="reasoning", text="abcde  fg!", time={"start": "a", "end": "b"}),
        delta("r1", 9, "late"),  # after the end: nothing
    ]
    out, ui = fold(M, frames)
    assert [(c["type"], c.get("delta")) for c in out] == [
        ("start", None),
        ("reasoning-start", None),
        ("reasoning-delta", "abc"),
        ("reasoning-delta", "de"),
        ("reasoning-delta", "  fg"),
        ("reasoning-delta", "!"),
        ("reasoning-end", None),
    ]
    assert ui.parts == [{"type": "reasoning", "text": "abcde  fg!"}]


def test_a_delta_of_a_part_not_seen_starting_waits_for_its_end():
    frames = [
        delta("t1", 0, "lost "),
        part(1, id="t1", type="text", text="", time={"start": "a"}),
        part(2, id="t1", type="text", text="lost start", time={"start": "a", "end": "b"}),
    ]
    _out, ui = fold(M, frames)
    assert ui.parts == [{"type": "text", "text": "lost start"}]


def test_text_that_streamed_before_its_part_started_is_shown_live_once_it_starts():
    """The Processor writes a new part with its next batch while the part's deltas go out
    in their window, so the first delta can arrive before the part's start event. The
    client sees that text, and what follows, as it streams, not only at the end."""
    reply = ReplyChunks(M)
    reply.begin()
    assert reply.accept(delta("t1", 0, "Hello ")) == []  # not started: nothing to show yet
    opened = reply.accept(part(1, id="t1", type="text", text="", time={"start": "a"}))
    assert [(c["type"], c.get("delta")) for c in opened] == [
        ("text-start", None),
        ("text-delta", "Hello"),
    ]
    assert reply.accept(delta("t1", 6, "world")) == [chunks.block_delta("text", "t1", " world")]
    ended = reply.accept(
        part(2, id="t1", type="text", text="Hello world", time={"start": "a", "end": "b"})
    )
    assert [c["type"] for c in ended] == ["text-end"]


def test_nothing_follows_the_end():
    reply = ReplyChunks(M)
    reply.begin()
    assert reply.accept(done(1, finish="stop"))[-1]["type"] == "finish"
    assert reply.done
    assert reply.accept(part(2, id="t9", type="text", text="", time={"start": "a"})) == []


def test_encoding():
    assert chunks.encode({"type": "text-delta", "id": "p", "delta": "é\n"}) == (
        'data: {"type":"text-delta","id":"p","delta":"é\\n"}\n\n'.encode()
    )
    assert chunks.DONE == b"data: [DONE]\n\n"
