"""One subscription per session per process, fanned out to that process's clients.

Fifty browsers watching one session through one server process must not mean
fifty channel-layer channels each receiving every delta (with Redis: fifty
messages to push and pop per delta). A :class:`SessionHub` joins the session's
group once, receives each frame once, and puts it in the queue of every local
subscriber (a socket or an SSE stream).

A subscriber that falls behind by more than ``QUEUE_LIMIT`` frames loses the
newest ones; like the channel layer, the hub delivers at most once, and the
subscriber's :class:`~sessions.streaming.SessionStream` repairs the gap from the
log or a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from channels.layers import get_channel_layer

from . import bus

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000
RETRY_PAUSE = 0.5  # seconds before receiving again after the layer failed

Frame = dict[str, Any]


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


def merge_deltas(frames: list[Frame]) -> list[Frame]:
    merged: list[Frame] = []
    for frame in frames:
        last = merged[-1] if merged else None
        if (
            last is not None
            and frame.get("kind") == "delta"
            and last.get("kind") == "delta"
            and frame["part_id"] == last["part_id"]
            and frame["offset"] == last["offset"] + len(last["delta"])
        ):
            merged[-1] = {**last, "delta": last["delta"] + frame["delta"]}
        else:
            merged.append(frame)
    return merged


class SessionHub:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.subscribers: set[Subscriber] = set()
        self.channel: str | None = None
        self.pumping: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    async def join(self, subscriber: Subscriber) -> None:
        async with self.lock:
            self.subscribers.add(subscriber)
            if self.pumping is None:
                layer = get_channel_layer()
                self.channel = await layer.new_channel()
                await layer.group_add(bus.session_group(self.session_id), self.channel)
                self.pumping = asyncio.get_running_loop().create_task(
                    self._pump(layer, self.channel)
                )

    async def leave(self, subscriber: Subscriber) -> None:
        async with self.lock:
            self.subscribers.discard(subscriber)
            if self.subscribers or self.pumping is None:
                return
            self.pumping.cancel()
            await asyncio.gather(self.pumping, return_exceptions=True)
            self.pumping = None
            layer = get_channel_layer()
            assert self.channel is not None
            await layer.group_discard(bus.session_group(self.session_id), self.channel)
            self.channel = None

    async def _pump(self, layer: Any, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A Redis hiccup must not leave the session's sockets deaf: what was lost
                # meanwhile, their streams repair from the log and snapshots.
                logger.exception("receiving frames of session %s failed; retrying", self.session_id)
                await asyncio.sleep(RETRY_PAUSE)
                continue
            raw = message.get("frame")
            if raw is None:
                continue
            frame = SharedFrame(raw)
            for subscriber in list(self.subscribers):
                subscriber.put(frame)


_hubs: dict[tuple[asyncio.AbstractEventLoop, str], SessionHub] = {}


@contextlib.asynccontextmanager
async def subscribe(session_id: str) -> AsyncIterator[Subscriber]:
    """Receive the session's frames (from the moment this is entered) while inside."""
    key = (asyncio.get_running_loop(), session_id)
    hub = _hubs.get(key)
    if hub is None:
        hub = _hubs[key] = SessionHub(session_id)
    subscriber = Subscriber()
    await hub.join(subscriber)
    try:
        yield subscriber
    finally:
        await hub.leave(subscriber)
        if not hub.subscribers and hub.pumping is None and _hubs.get(key) is hub:
            del _hubs[key]
