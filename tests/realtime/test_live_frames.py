"""live_frames, the one live-stream loop the socket, SSE and the AI SDK route encode.

Driven with a real session in the store and a real hub Subscriber fed by hand, so
what arrives live and what only reaches the log is up to the test.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.realtime.hub import Subscriber
from forge.realtime.stream import ENDED_KEPT, HEARTBEAT, Heartbeat, SessionStream, live_frames
from sessions import selectors, services
from sessions.frames import Frame, event_frame, status_frame

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

DEADLINE = 60.0  # generous: CI runs under heavy load


async def _no_snapshots(session_id: str) -> list[dict[str, Any]]:
    return []


def _stream(session: Any) -> SessionStream:
    """A client that has the log up to now (its ``session.created``, for one)."""
    after = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    return SessionStream(session=session, after=after, snapshots=_no_snapshots)


async def _next(frames: AsyncGenerator[Frame | Heartbeat, None]) -> Frame | Heartbeat:
    return await asyncio.wait_for(anext(frames), DEADLINE)


async def _next_frame(frames: AsyncGenerator[Frame | Heartbeat, None]) -> Frame:
    frame = await _next(frames)
    assert not isinstance(frame, Heartbeat)
    return frame


def _log_message(session: Any) -> dict[str, Any]:
    services.update_message(session=session, info={"role": "user"})
    return selectors.events_after(tenant=session.tenant, session_id=session.pk, after=0)[-1]


async def _log_then_stream(session: Any) -> tuple[dict[str, Any], SessionStream]:
    """A stream from before a newly logged message (its backlog holds the message)."""
    stream = await database_sync_to_async(_stream)(session)
    return await database_sync_to_async(_log_message)(session), stream


async def test_backlog_then_live_frames_without_duplicates(session, settings):
    settings.FORGE_STREAM_RESYNC_SECONDS = 30
    first, stream = await _log_then_stream(session)
    source = Subscriber()
    frames = live_frames(stream, source)
    async with contextlib.aclosing(frames):
        assert await _next(frames) == event_frame(first)  # the backlog, from the log
        second = await database_sync_to_async(_log_message)(session)
        source.put(event_frame(first))  # already sent by the backlog: dropped
        source.put(event_frame(second))
        assert await _next(frames) == event_frame(second)


async def test_a_lost_tail_is_read_from_the_log_when_live_frames_go_quiet(session, settings):
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.05
    source = Subscriber()
    frames = live_frames(await database_sync_to_async(_stream)(session), source)
    async with contextlib.aclosing(frames):
        source.put(status_frame(session.pk, "busy"))
        assert (await _next_frame(frames))["status"] == "busy"
        # Logged, but its live frame was lost (the layer dropped it).
        lost = await database_sync_to_async(_log_message)(session)
        assert await _next(frames) == event_frame(lost)


async def test_heartbeats_only_when_asked_for(session, settings):
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.05
    beating = live_frames(
        await database_sync_to_async(_stream)(session), Subscriber(), heartbeat=0.05
    )
    async with contextlib.aclosing(beating):
        assert await _next(beating) is HEARTBEAT
        assert await _next(beating) is HEARTBEAT
    silent = live_frames(await database_sync_to_async(_stream)(session), Subscriber())
    async with contextlib.aclosing(silent):
        # Several quiet periods pass: nothing at all is yielded without a heartbeat.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(silent), 0.5)


async def test_without_replay_the_backlog_is_left_to_the_caller(session, settings):
    settings.FORGE_STREAM_RESYNC_SECONDS = 30
    _, stream = await _log_then_stream(session)
    backlog = await stream.backlog()
    assert len(backlog) == 1
    source = Subscriber()
    frames = live_frames(stream, source, replay=False)
    async with contextlib.aclosing(frames):
        source.put(status_frame(session.pk, "busy"))
        assert (await _next_frame(frames))["status"] == "busy"  # not the event again


T0, T1 = "2026-12-06T08:00:00.000Z", "2026-12-06T08:00:01.000Z"


def _log_a_finished_text(session: Any) -> tuple[str, str]:
    """A reply whose text part started and ended in the log: (message id, part id)."""
    reply = services.update_message(session=session, info={"role": "assistant"})
    message_id = reply.data["id"]
    part = services.update_part(
        session=session,
        part={"message_id": message_id, "type": "text", "text": "", "time": {"start": T0}},
    )
    part_id = part.data["id"]
    services.update_part(
        session=session,
        part={"id": part_id, "text": "hello there", "time": {"start": T0, "end": T1}},
    )
    return message_id, part_id


async def test_a_part_seen_ending_gets_no_delta_or_snapshot_after_its_end(session, settings):
    """QA (MEDIUM): with many watchers, a socket opened before a reply received the
    reasoning's end event in its backlog, then that part's deltas from the hub queue
    (offset 0: trusted as a part not seen start) or a snapshot of it (the buffer not
    yet dropped, sometimes empty): a client appending deltas showed it twice, one
    applying snapshots cleared a finished part. Once a stream has sent a part's end,
    nothing more of that part's text is sent."""
    stream = await database_sync_to_async(_stream)(session)
    message_id, part_id = await database_sync_to_async(_log_a_finished_text)(session)
    stale = {
        "session_id": session.pk,
        "message_id": message_id,
        "part_id": part_id,
        "field": "text",
        "text": "hello",
    }

    async def still_buffered(session_id: str) -> list[dict[str, Any]]:
        return [stale]  # the writer has not dropped the buffer yet

    stream.snapshots = still_buffered
    backlog = await stream.backlog()
    assert [f["kind"] for f in backlog] == ["event", "event", "event"]
    assert backlog[-1]["data"]["time"]["end"]

    def delta(offset: int, text: str) -> Frame:
        return {
            "kind": "delta",
            "type": "part.delta",
            "session_id": session.pk,
            "message_id": message_id,
            "part_id": part_id,
            "field": "text",
            "offset": offset,
            "delta": text,
        }

    assert await stream.accept(delta(0, "hello")) == []  # queued before the end
    assert await stream.accept(delta(5, " there")) == []  # no repair either


async def test_a_long_lived_stream_keeps_a_bounded_set_of_finished_parts(session):
    """A socket watching a long conversation noted every finished part's id for its
    whole life (one id per text or reasoning part, ~1 MB a connection after 10,000).
    It keeps the newest ``ENDED_KEPT`` (a delta still queued for a part is behind at
    most the parts that ended after it), and none once the session is idle: the
    turn's producer sent every delta of its parts before its ``idle`` status."""
    stream = await database_sync_to_async(_stream)(session)
    for n in range(ENDED_KEPT + 500):
        stream._note_event(
            {
                "kind": "event",
                "type": "part.updated",
                "seq": stream.last_seq + 1,
                "data": {"id": f"prt_{n}", "type": "text", "text": "x", "time": {"end": T1}},
            }
        )
    assert len(stream.ended) == ENDED_KEPT
    assert f"prt_{ENDED_KEPT + 499}" in stream.ended
    assert "prt_0" not in stream.ended
    await stream.accept(status_frame(session.pk, "idle"))
    assert not stream.ended


async def test_a_stream_watching_a_turn_keeps_reading_the_log_while_the_layer_is_silent(
    session, settings
):
    """QA (HIGH): after a Redis crash mid-reply, a socket of another daphne got no live
    frame again; its one quiet-time check of the log sent what was there, and then it
    never looked again, so the reply's end (logged later) never reached it. While a turn
    it saw start has not ended, a quiet stream keeps checking the log (backing off)."""
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.05
    source = Subscriber()
    frames = live_frames(await database_sync_to_async(_stream)(session), source)
    async with contextlib.aclosing(frames):
        source.put(status_frame(session.pk, "busy"))
        assert (await _next_frame(frames))["status"] == "busy"
        # The layer goes silent for good; the log goes on.
        first = await database_sync_to_async(_log_message)(session)
        assert await asyncio.wait_for(anext(frames), 5) == event_frame(first)
        second = await database_sync_to_async(_log_message)(session)
        assert await asyncio.wait_for(anext(frames), 5) == event_frame(second)
        source.put(status_frame(session.pk, "idle"))  # the turn ended: no more checks
        assert (await _next_frame(frames))["status"] == "idle"
        third = await database_sync_to_async(_log_message)(session)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(frames), 0.5)
        assert third  # (left to the next live frame or the next turn)


async def test_a_stream_opened_mid_turn_reads_the_log_while_the_layer_is_silent(
    session, settings, monkeypatch
):
    """QA (MEDIUM): a stream that *opens* while a turn runs learns so from its backlog
    (``busy`` after it, or the reply logged open), not from a live frame; only live
    frames made it look at the log when quiet, so when none came after it opened (a
    reply's last frames dropped by the layer, a bus that gave up on a frozen Redis, a
    tool running meanwhile), the reply's end never reached it: its client showed the
    turn running until the next one."""
    from forge import runtime

    settings.FORGE_STREAM_RESYNC_SECONDS = 0.05
    settings.FORGE_STREAM_RECHECK_SECONDS = 60  # the catch-up of quiet streams is not it
    monkeypatch.setattr(runtime, "is_busy", lambda **kwargs: True)
    frames = live_frames(await database_sync_to_async(_stream)(session), Subscriber(), status=True)
    async with contextlib.aclosing(frames):
        assert (await _next_frame(frames))["status"] == "busy"
        # The layer stays silent; the log goes on.
        lost = await database_sync_to_async(_log_message)(session)
        assert await asyncio.wait_for(anext(frames), 5) == event_frame(lost)


async def test_a_reply_stream_opened_mid_reply_reads_the_log_while_the_layer_is_silent(
    session, settings
):
    """The same for a stream whose backlog is the running reply and that sends no status
    (the AI SDK's resume): its end, logged but never received live, reaches it."""
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.05
    settings.FORGE_STREAM_RECHECK_SECONDS = 60

    def open_reply() -> str:
        return services.update_message(session=session, info={"role": "assistant"}).data["id"]

    message_id = await database_sync_to_async(open_reply)()
    stream = SessionStream(session=session, after=0, snapshots=_no_snapshots)
    frames = live_frames(stream, Subscriber())
    async with contextlib.aclosing(frames):
        while (await _next_frame(frames))["data"].get("id") != message_id:
            pass  # the backlog, up to the open reply
        lost = await database_sync_to_async(_log_message)(session)
        assert await asyncio.wait_for(anext(frames), 5) == event_frame(lost)
