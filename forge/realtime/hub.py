"""One subscription per session per process, fanned out to that process's clients.

Fifty browsers watching one session through one server process must not mean
fifty channel-layer channels each receiving every delta (with Redis: fifty
messages to push and pop per delta). A :class:`SessionHub` joins the session's
group once, receives each frame once, and puts it in the queue of every local
subscriber (a socket or an SSE stream).

A subscriber that falls behind by more than ``QUEUE_LIMIT`` frames loses the
newest ones; like the channel layer, the hub delivers at most once, and the
subscriber's :class:`~forge.realtime.stream.SessionStream` repairs the gap from the
log or a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from sessions import bus
from sessions.frames import Frame, merge_deltas

from .receiver import Receiver

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000


class SharedFrame(dict[str, Any]):
    """A frame as the hub received it, with its JSON text encoded once for every
    subscriber (a subscriber's stream that changes a frame makes a new dict)."""

    __slots__ = ("text",)

    def __init__(self, frame: Frame) -> None:
        super().__init__(frame)
        self.text = json.dumps(frame, ensure_ascii=False)


def encode(frame: Frame) -> str:
    """The frame's JSON text (encoded once per frame the hub shares)."""
    if isinstance(frame, SharedFrame):
        return frame.text
    return json.dumps(frame, ensure_ascii=False)


class Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[Frame] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        self.dropped = 0

    def put(self, frame: Frame) -> None:
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.dropped += 1

    async def batch(self) -> list[Frame]:
        """The next frames: wait for one, take whatever else is already queued, and merge
        runs of contiguous deltas of one part into one (fewer, larger frames for a client
        that fell behind; nothing waits when it keeps up)."""
        frames = [await self.queue.get()]
        while not self.queue.empty():
            frames.append(self.queue.get_nowait())
        return merge_deltas(frames)


class SessionHub:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.subscribers: set[Subscriber] = set()
        self.receiver: Receiver | None = None
        self.lock = asyncio.Lock()

    @property
    def pumping(self) -> asyncio.Task[None] | None:
        return self.receiver.task if self.receiver else None

    async def join(self, subscriber: Subscriber) -> None:
        async with self.lock:
            if self.receiver is None:
                self.receiver = await Receiver.join(
                    bus.session_group(self.session_id),
                    self._fan_out,
                    name=f"the group of session {self.session_id}",
                )
            self.subscribers.add(subscriber)

    async def leave(self, subscriber: Subscriber) -> None:
        async with self.lock:
            self.subscribers.discard(subscriber)
            if self.subscribers or self.receiver is None:
                return
            receiver, self.receiver = self.receiver, None
            await receiver.leave()

    def _fan_out(self, message: dict[str, Any]) -> None:
        # What a Redis hiccup lost meanwhile, the subscribers' streams repair from the log
        # and snapshots.
        raw = message.get("frame")
        if raw is None:
            return
        frame = SharedFrame(raw)
        for subscriber in list(self.subscribers):
            subscriber.put(frame)


_hubs: dict[tuple[asyncio.AbstractEventLoop, str], SessionHub] = {}


@contextlib.asynccontextmanager
async def subscribe(session_id: str) -> AsyncIterator[Subscriber]:
    """Receive the session's frames (from the moment this is entered) while inside."""
    loop = asyncio.get_running_loop()
    key = (loop, session_id)
    hub = _hubs.get(key)
    if hub is None:
        # Hubs of loops that have ended (a test's, a worker thread's) can serve no one.
        for dead in [k for k in _hubs if k[0].is_closed()]:
            del _hubs[dead]
        hub = _hubs[key] = SessionHub(session_id)
    subscriber = Subscriber()
    try:
        await hub.join(subscriber)
        try:
            yield subscriber
        finally:
            await hub.leave(subscriber)
    finally:
        if not hub.subscribers and hub.receiver is None and _hubs.get(key) is hub:
            del _hubs[key]
