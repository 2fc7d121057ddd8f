"""Publishing to a session's channel-layer group.

One group per session. Durable frames (one per log event, ``kind: "event"``)
are published after the transaction that wrote the event commits; ephemeral
frames (``kind: "delta" | "snapshot" | "status"``) go to the bus only.
Channel layers deliver at most once: a subscriber repairs gaps from the log
(``seq``) or from a snapshot (``offset``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import threading
import time
import weakref
from typing import Any

from asgiref.sync import SyncToAsync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from .frames import Frame, is_delta, merge_deltas

logger = logging.getLogger(__name__)

FRAME_MESSAGE_TYPE = "forge.frame"  # handled by a consumer's ``forge_frame`` method


def session_group(session_id: str) -> str:
    return f"forge.session.{session_id}"


def _message(frame: Frame) -> dict[str, Any]:
    return {"type": FRAME_MESSAGE_TYPE, "frame": frame}


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The live event loop this thread works for, if ``sync_to_async`` runs it.

    Frames must be sent from that loop (an in-memory layer's consumers wait there).
    asgiref records it in a thread-local (the one ``async_to_sync`` reads too).
    """
    loop: asyncio.AbstractEventLoop | None
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    pid = getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None)
    if loop is not None and pid == os.getpid() and loop.is_running() and not loop.is_closed():
        return loop
    return None


class _ThreadLoop:
    """An event loop owned by one thread, for sync callers that no server loop waits for
    (management commands, scripts, plain threads). Closed when its thread ends.

    ``async_to_sync`` would start a thread and a loop per call, and handing frames
    to a shared publisher thread costs a thread wake-up each; a loop of the
    caller's own runs ``group_send`` in place (and keeps channels-redis's
    connection pool, which is per loop, warm).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_closed():
            self.loop.close()


_thread_loops = threading.local()


def _own_loop() -> asyncio.AbstractEventLoop:
    holder: _ThreadLoop | None = getattr(_thread_loops, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _thread_loops.holder = _ThreadLoop()
    return holder.loop


class _LoopPublisher:
    """The ordered outbox of one event loop.

    Frames go to the channel layer in the order they were handed over, whether
    by coroutines of the loop (deltas) or by threads working for it (events,
    after their transaction commits), without those threads waiting for the
    send. A drain task runs only while frames are queued. A coroutine that
    publishes while the queue is long waits for it to shrink (backpressure).
    """

    HIGH_WATER = 1000

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: collections.deque[tuple[str, Frame]] = collections.deque()
        self.drained = asyncio.Event()
        self.drained.set()
        self.draining: asyncio.Task[None] | None = None

    def put(self, group: str, frame: Frame) -> None:
        """Queue a frame (in the loop's thread)."""
        self.queue.append((group, frame))
        self.drained.clear()
        if self.draining is None or self.draining.done():
            self.draining = self.loop.create_task(self._drain())

    BATCH = 200  # frames handed to the layer at once, at most

    async def _drain(self) -> None:
        layer = get_channel_layer()
        try:
            while self.queue:
                ready: list[tuple[str, Frame]] = []
                while self.queue and len(ready) < self.BATCH:
                    group, frame = self.queue.popleft()
                    ready += [
                        (group, merged)
                        for merged in merge_deltas(self._deltas_following(group, frame))
                    ]
                await _send_all(layer, ready)
        finally:
            if not self.queue:
                self.drained.set()

    def _deltas_following(self, group: str, frame: Frame) -> list[Frame]:
        """``frame`` and, when it is a delta, the deltas queued right behind it for the same
        group (sent as one frame where they continue each other: see ``merge_deltas``)."""
        run = [frame]
        if is_delta(frame):
            while self.queue and self.queue[0][0] == group and is_delta(self.queue[0][1]):
                run.append(self.queue.popleft()[1])
        return run


# A publish (one pipeline, or one frame) that has not gone within this many seconds is
# given up: Redis answers in a millisecond, and one that does not (frozen, partitioned)
# would hold the outbox for the layer's socket timeout (10 s) per frame.
PUBLISH_TIMEOUT = 1.0
# After a failed publish, frames are dropped unsent for this many seconds (the bus is
# best effort: subscribers repair gaps from the log), then publishing is tried again.
PAUSE_AFTER_FAILURE = 5.0


class _Breaker:
    """Whether to try publishing, per process: after a failure, not for a while. Says
    once when publishing starts failing, and once when it works again, with how many
    frames were lost meanwhile (not a traceback per frame: one reply during a 5 s outage
    logged 36, 150 KB)."""

    def __init__(self) -> None:
        self.failing_since: float | None = None
        self.retry_at = 0.0
        self.lost = 0

    def closed(self, frames: int) -> bool:
        """Whether to try sending ``frames`` frames now (else they are counted lost)."""
        if self.failing_since is None or time.monotonic() >= self.retry_at:
            return True
        self.lost += frames
        return False

    def failed(self, frames: int, exc: BaseException) -> None:
        now = time.monotonic()
        self.lost += frames
        self.retry_at = now + PAUSE_AFTER_FAILURE
        if self.failing_since is None:
            self.failing_since = now
            logger.warning(
                "publishing to the channel layer is failing (%s: %s); frames are dropped, "
                "and it is tried again every %.0f s",
                type(exc).__name__,
                exc,
                PAUSE_AFTER_FAILURE,
            )

    def sent(self) -> None:
        if self.failing_since is not None:
            logger.warning(
                "publishing to the channel layer works again, after %.1f s; %d frames "
                "were lost meanwhile",
                time.monotonic() - self.failing_since,
                self.lost,
            )
            self.failing_since, self.lost = None, 0


_breaker = _Breaker()


def try_publishing_again() -> None:
    """Try the next publish whatever failed before (tests; a layer known to be back)."""
    _breaker.retry_at = 0.0


def forget_failures() -> None:
    """Publish as if nothing had ever failed: no pause, and no "works again" to say
    (tests: one that failed the layer left the next one that line, a CI pass's flake)."""
    global _breaker
    _breaker = _Breaker()


async def _send_all(layer: Any, frames: list[tuple[str, Frame]]) -> None:
    """Hand frames to the layer in order: one pipeline of PUBLISH commands with the
    Redis pub/sub layer (a window of deltas of every turn of the process is one
    round trip, not one per frame), else a ``group_send`` each. Frames the layer does
    not take within ``PUBLISH_TIMEOUT`` are lost, as a layer loses them (clients
    repair the gap); after a failure the next ones are dropped unsent for a while
    (:class:`_Breaker`)."""
    if not _breaker.closed(len(frames)):
        return
    publish = _pipelined(layer) if len(frames) > 1 else None
    sent = 0
    try:
        if publish is not None:
            await asyncio.wait_for(publish(frames), PUBLISH_TIMEOUT)
        else:
            for group, frame in frames:
                await asyncio.wait_for(layer.group_send(group, _message(frame)), PUBLISH_TIMEOUT)
                sent += 1
    except Exception as exc:
        _breaker.failed(len(frames) - sent, exc)
        return
    _breaker.sent()


def _pipelined(layer: Any) -> Any:
    """A pipelined ``group_send`` of many frames for channels-redis's pub/sub layer, or
    None for any other layer (or one whose ``group_send`` was replaced, as tests that
    inject faults do). It publishes exactly what ``group_send`` would: the layer's
    serialization, to the layer's channel for the group, on the shard's connection
    and under the shard's lock (channels-redis 4.x internals)."""
    try:
        from channels_redis.pubsub import RedisPubSubChannelLayer
    except ImportError:  # pragma: no cover - channels-redis is a dependency
        return None
    if not isinstance(layer, RedisPubSubChannelLayer) or "group_send" in vars(layer):
        return None

    async def publish(frames: list[tuple[str, Frame]]) -> None:
        loop_layer = layer._get_layer()
        shards: dict[Any, list[tuple[str, bytes]]] = {}
        for group, frame in frames:
            channel = loop_layer._get_group_channel_name(group)
            payload = layer.serialize(_message(frame))
            shards.setdefault(loop_layer._get_shard(channel), []).append((channel, payload))
        for shard, messages in shards.items():
            async with shard._lock:
                shard._ensure_redis()
                async with shard._redis.pipeline(transaction=False) as pipe:
                    for channel, payload in messages:
                        pipe.publish(channel, payload)
                    await pipe.execute()

    return publish


_publishers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopPublisher] = (
    weakref.WeakKeyDictionary()
)


def _publisher(loop: asyncio.AbstractEventLoop) -> _LoopPublisher:
    publisher = _publishers.get(loop)
    if publisher is None:
        publisher = _publishers[loop] = _LoopPublisher(loop)
    return publisher


def publish(session_id: str, frame: dict[str, Any]) -> None:
    """Send one frame to the session's group, from synchronous code (see
    :func:`publish_many`)."""
    publish_many(session_id, [frame])


def publish_many(session_id: str, frames: list[dict[str, Any]]) -> None:
    """Send frames of one session to its group, in order, from synchronous code, at the
    cost of one hand-over (a batch's frames, published after its commit).

    In a thread working for an event loop (``sync_to_async``), the frames join
    that loop's ordered outbox and this returns at once. Elsewhere (management
    commands, scripts) they are sent on a loop of this thread's own, and this
    returns once they are sent: a frame the layer refuses does not keep the rest
    from going (clients repair gaps from the log); the first refusal is raised
    after them.
    """
    layer = get_channel_layer()
    if layer is None or not frames:
        return
    group = session_group(session_id)
    loop = server_loop()
    if loop is None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("bus.publish() called from a running event loop: await apublish()")
    if _nobody_listens(layer, group):
        return
    if loop is not None:
        loop.call_soon_threadsafe(_enqueue, loop, group, frames)
        return

    async def send_all() -> None:
        refused: Exception | None = None
        for frame in frames:
            try:
                await layer.group_send(group, _message(frame))
            except Exception as exc:
                refused = refused or exc
        if refused is not None:
            raise refused

    _own_loop().run_until_complete(send_all())


def _nobody_listens(layer: Any, group: str) -> bool:
    """Whether ``group`` has no member on a process-local (in-memory) layer, so that
    sending to it would reach no one: the frame is dropped here, at no cost, instead
    of crossing to the loop's outbox (a thread wake-up) and the layer.

    Dropping it now is what the layer would do with it now. A subscriber that joins
    later misses nothing it would otherwise get: it joins the group before it reads
    the log (and a reply's snapshot) from its cursor, so frames published before its
    join come to it from there (CONTRACT §4). On a shared layer (Redis) members may
    be in other processes: every frame goes out."""
    return isinstance(layer, InMemoryChannelLayer) and not layer.groups.get(group)


def _enqueue(loop: asyncio.AbstractEventLoop, group: str, frames: list[Frame]) -> None:
    publisher = _publisher(loop)
    for frame in frames:
        publisher.put(group, frame)


async def apublish(session_id: str, frame: dict[str, Any]) -> None:
    """Send one frame to the session's group, from async code (in order with the rest)."""
    layer = get_channel_layer()
    if layer is None:
        return
    group = session_group(session_id)
    if _nobody_listens(layer, group):
        return
    publisher = _publisher(asyncio.get_running_loop())
    if len(publisher.queue) >= publisher.HIGH_WATER:
        await publisher.drained.wait()
    publisher.put(group, frame)


async def flush() -> None:
    """Wait until every frame this loop has queued has been handed to the channel layer."""
    publisher = _publishers.get(asyncio.get_running_loop())
    if publisher is not None:
        await publisher.drained.wait()


def publish_after_commit(session_id: str, frame: dict[str, Any]) -> None:
    """``transaction.on_commit`` target: a bus failure must not undo a committed write."""
    try:
        publish(session_id, frame)
    except Exception:
        logger.exception("could not publish %s seq %s", frame.get("type"), frame.get("seq"))


def publish_many_after_commit(session_id: str, frames: list[dict[str, Any]]) -> None:
    """``transaction.on_commit`` target for a batch's frames (see
    :func:`publish_after_commit`)."""
    try:
        publish_many(session_id, frames)
    except Exception:
        logger.exception("could not publish %d frames of session %s", len(frames), session_id)
