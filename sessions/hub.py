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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from channels.layers import get_channel_layer

from . import bus

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000
RETRY_PAUSE = 0.5  # seconds before receiving again after the layer failed
# Seconds a cancelled receive has to end before it is woken by a message. Not zero: a
# wake-up that arrives after the receive ended would sit in channels-redis' receive
# buffer for good.
STOP_GRACE = 0.25

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


WAKE_UP = {"type": "forge.wake_up"}  # sent to a receiver that must notice it should stop


@dataclass
class Receiver:
    """A channel in a channel-layer group, and a task handing what it receives to
    ``handle``, that can be left for sure.

    A Redis hiccup does not end the loop (it logs, pauses ``RETRY_PAUSE`` and
    receives again). Cancelling a channel-layer receive is not always enough to
    stop it: a cancellation that lands while channels-redis and redis-py are
    between a blocking read and the next one can be swallowed, and the receive
    goes on waiting. So stopping also marks the loop as stopping and, if it has
    not ended within ``STOP_GRACE``, sends a message to its own channel, which
    makes the receive return.
    """

    layer: Any
    channel: str
    group: str
    name: str  # what the group is, for the logs
    task: asyncio.Task[None] | None = None
    stopping: bool = False

    @classmethod
    async def join(
        cls, group: str, handle: Callable[[dict[str, Any]], bool | None], *, name: str
    ) -> Receiver:
        """Join ``group`` on a new channel and receive; ``handle`` returning True ends it."""
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        receiver = cls(layer, channel, group, name)
        receiver.task = asyncio.get_running_loop().create_task(receiver._receive(handle))
        return receiver

    async def _receive(self, handle: Callable[[dict[str, Any]], bool | None]) -> None:
        while not self.stopping:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                if being_cancelled():
                    raise  # the layer turned our cancellation into another error
                logger.exception("receiving on %s failed; retrying", self.name)
                await asyncio.sleep(RETRY_PAUSE)
                continue
            if message == WAKE_UP or self.stopping:
                continue
            if handle(message):
                return

    async def stop(self) -> None:
        self.stopping = True
        if self.task is None or self.task.done():
            return
        self.task.cancel()
        _, pending = await asyncio.wait({self.task}, timeout=STOP_GRACE)
        if pending:
            logger.warning("a receive on %s ignored its cancellation; waking it", self.channel)
            await self.layer.send(self.channel, WAKE_UP)
            await asyncio.wait({self.task}, timeout=10.0)
        if self.task.done() and not self.task.cancelled():
            self.task.exception()  # it ended as asked; whatever it raised on the way is moot

    async def leave(self) -> None:
        """Stop receiving and leave the group. An unreachable layer is logged, not raised:
        the membership expires with the group (channels-redis ``group_expiry``) and
        nothing reads the channel any more."""
        try:
            await self.stop()
            await self.layer.group_discard(self.group, self.channel)
        except Exception:
            logger.warning("leaving %s failed", self.name, exc_info=True)


def being_cancelled() -> bool:
    """Whether the current task was asked to stop (even if an error surfaced instead of
    ``CancelledError``, as channels-redis can raise while cleaning up a receive)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


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
