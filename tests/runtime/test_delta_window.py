"""Deltas coalesced at the source (forge.runtime.deltas): bounded frames, contiguous
offsets, flushed before every write and on abort; a window of 0 sends every delta."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.runtime import abort_turn, start_turn
from sessions.models import Part
from tests.replies import paced, words

from .conftest import ahistory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


def text_deltas(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in frames if f["kind"] == "delta"]


def assert_contiguous(deltas: list[dict[str, Any]]) -> dict[str, str]:
    """Each part's frames start where the previous one ended; the text of every part."""
    texts: dict[str, str] = {}
    for frame in deltas:
        have = texts.get(frame["part_id"], "")
        assert frame["offset"] == len(have), (frame["offset"], len(have))
        texts[frame["part_id"]] = have + frame["delta"]
    return texts


def stored_texts(items: list[dict[str, Any]]) -> dict[str, str]:
    reply = items[-1]
    return {p["id"]: p["text"] for p in reply["parts"] if p["type"] in ("text", "reasoning")}


async def test_a_fast_stream_becomes_a_bounded_number_of_contiguous_frames(
    session, agents, script, record, settings
):
    settings.FORGE_DELTA_WINDOW_MS = 40
    deltas = words(150)
    script([paced(deltas, 0.002)])
    recorder = await record(session)
    began = time.monotonic()
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, 30)
    elapsed = time.monotonic() - began
    frames = text_deltas(await recorder.settle())
    # At most one frame per part and window, plus the flush at the part's end.
    assert len(frames) <= elapsed / 0.040 + 3
    assert len(frames) < len(deltas) / 3
    texts = assert_contiguous(frames)
    assert list(texts.values()) == ["".join(deltas)]
    assert list(stored_texts(await ahistory(session)).values()) == ["".join(deltas).rstrip()]


async def test_a_window_of_zero_publishes_every_delta_as_before(
    session, agents, script, record, settings
):
    settings.FORGE_DELTA_WINDOW_MS = 0
    deltas = words(20)
    script([paced(deltas, 0.01)])
    recorder = await record(session)
    started = await start_turn(session=session, text="go")
    await asyncio.wait_for(started.task, 30)
    frames = text_deltas(await recorder.settle())
    assert [f["delta"] for f in frames] == deltas
    assert_contiguous(frames)


async def test_the_window_is_flushed_before_every_write_to_the_log(
    session, agents, script, record, settings
):
    # A long window: without the flush before each write, the text would reach the
    # bus after the events that follow it in the model's stream.
    settings.FORGE_DELTA_WINDOW_MS = 5000
    script(
        [
            [
                {"type": "reasoning-start", "id": "r"},
                {"type": "reasoning-delta", "id": "r", "delta": "think "},
                {"type": "reasoning-delta", "id": "r", "delta": "hard"},
                {"type": "reasoning-end", "id": "r"},
                {"type": "text-start", "id": "t"},
                {"type": "text-delta", "id": "t", "delta": "a "},
                {"type": "text-delta", "id": "t", "delta": "b "},
                {"type": "tool-input-start", "call_id": "c1", "tool": "no_such_tool"},
                {"type": "text-delta", "id": "t", "delta": "c"},
                {"type": "tool-call", "call_id": "c1", "tool": "no_such_tool", "input": "{}"},
                {"type": "text-delta", "id": "t", "delta": " d"},
                {"type": "text-end", "id": "t"},
                {"type": "finish-step", "finish_reason": "stop"},
            ]
        ]
    )
    recorder = await record(session)
    started = await asyncio.wait_for(start_turn(session=session, text="go"), 30)
    began = time.monotonic()
    await asyncio.wait_for(started.task, 30)
    assert time.monotonic() - began < 4  # flushed by the writes, not by the window's end
    frames = await recorder.settle()
    # Each delta frame carries exactly the text streamed since the previous write.
    published: list[tuple[str, str]] = []
    for frame in frames:
        if frame["kind"] == "delta":
            published.append(("delta", frame["delta"]))
        elif frame["kind"] == "event" and frame["type"] == "part.updated":
            data = frame["data"]
            if data["type"] == "tool":
                published.append(("tool", data["state"]["status"]))
            elif data["type"] in ("text", "reasoning") and data["time"].get("end"):
                published.append(("end", data["type"]))
    assert published == [
        ("delta", "think hard"),
        ("end", "reasoning"),
        ("delta", "a b "),
        ("tool", "pending"),
        ("delta", "c"),
        ("tool", "error"),
        ("delta", " d"),
        ("end", "text"),
    ]
    texts = assert_contiguous(text_deltas(frames))
    assert texts == stored_texts(await ahistory(session))


async def test_an_aborted_reply_stores_exactly_the_text_clients_were_sent(
    session, agents, script, record, settings
):
    # The abort lands while text waits in a long window: it is published first.
    settings.FORGE_DELTA_WINDOW_MS = 5000
    script([paced(words(400), 0.01)])
    recorder = await record(session)
    started = await start_turn(session=session, text="talk slowly")

    def streaming() -> bool:
        return Part.objects.filter(session=session, type="text").exists()

    deadline = time.monotonic() + 20
    while not await database_sync_to_async(streaming)():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    await abort_turn(session=session)
    assert started.task.done()
    frames = await recorder.settle()
    # Every delta reaches clients before the event that ends its part.
    ended = next(
        i
        for i, f in enumerate(frames)
        if f["kind"] == "event"
        and f["type"] == "part.updated"
        and f["data"]["type"] == "text"
        and f["data"]["time"].get("end")
    )
    assert not text_deltas(frames[ended:])
    sent = assert_contiguous(text_deltas(frames[:ended]))
    stored = stored_texts(await ahistory(session))
    assert (await ahistory(session))[-1]["info"]["error"]["name"] == "MessageAbortedError"
    assert set(sent) == set(stored)
    for part_id, text in stored.items():
        assert text == sent[part_id].rstrip()
        assert text.startswith("w0 w1")


@pytest.mark.parametrize("window", [0.0, 0.01], ids=["every-delta", "ticker"])
async def test_text_confirmed_before_an_await_is_not_published_once_the_lease_is_lost(
    session, monkeypatch, window
):
    """A window confirms its turn's lease, then awaits (the mirror's append, an earlier
    frame): a loop frozen there past the lease resumes with the lease lost, and another
    process may have finalized the reply. The frame is confirmed again as it goes out
    (a loaded CI pass published text of a finalized reply so)."""
    from forge.runtime import deltas
    from sessions import services

    published: list[str] = []
    answers = iter([True])  # confirmed once; lost from then on

    async def confirm() -> bool:
        return next(answers, False)

    async def apublish_delta(**kwargs: Any) -> None:
        published.append(kwargs["delta"])

    monkeypatch.setattr(services, "apublish_delta", apublish_delta)
    sent = deltas.DeltaWindow(session=session, message_id="msg_x", window=window, confirm=confirm)
    await sent.add("prt_x", 0, "word ")
    await asyncio.sleep(0.1)  # the ticker's tick
    await sent.flush()
    assert published == []
