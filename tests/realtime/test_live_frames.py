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
from forge.realtime.stream import HEARTBEAT, Heartbeat, SessionStream, live_frames
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
