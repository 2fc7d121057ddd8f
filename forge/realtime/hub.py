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

Every face opens its stream the same way, :func:`join`: the subscription is open
(the layer answered, within ``FORGE_LAYER_TIMEOUT``) before the stream takes one of
its user's slots (:mod:`forge.realtime.limits`), and :meth:`Subscription.close` gives
both back, once, whatever happened. A layer that is away or does not answer is
``StreamUnavailable`` (503, or close 4503 on the socket), never a wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings

from forge.errors import StreamUnavailable
from forge.pubsub import RECONNECTED
from forge.runtime.receiver import Receiver
from forge.telemetry import metrics
from sessions import bus
from sessions.frames import Frame, merge_deltas

from . import limits

logger = logging.getLogger(__name__)

QUEUE_LIMIT = 10_000

# Put in every subscriber's queue when the layer's subscription came back after a
# failure: what was published meanwhile was lost, the stream reads it from the log
# (``SessionStream.accept``). Never sent to a client.
RESYNC: Frame = {"kind": "resync"}


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
                    confirm=True,
                )
            self.subscribers.add(subscriber)

    async def leave(self, subscriber: Subscriber) -> None:
        async with self.lock:
            self.subscribers.discard(subscriber)
            if self.subscribers or self.receiver is None:
                return
            receiver, self.receiver = self.receiver, None
            await receiver.leave()

    @property
    def idle(self) -> bool:
        return not self.subscribers and self.receiver is None

    def _fan_out(self, message: dict[str, Any]) -> None:
        # What a Redis hiccup lost meanwhile, the subscribers' streams repair from the log
        # and snapshots.
        raw = message.get("frame")
        if raw is None:
            if message.get("type") == RECONNECTED["type"]:
                for subscriber in list(self.subscribers):
                    subscriber.put(RESYNC)
            return
        frame = SharedFrame(raw)
        for subscriber in list(self.subscribers):
            subscriber.put(frame)


_hubs: dict[tuple[asyncio.AbstractEventLoop, str], SessionHub] = {}
_background_closes: set[asyncio.Task[None]] = set()  # scheduled from threads or timers


def _hub(loop: asyncio.AbstractEventLoop, session_id: str) -> SessionHub:
    hub = _hubs.get((loop, session_id))
    if hub is None:
        # Hubs of loops that have ended (a test's, a worker thread's) can serve no one.
        for dead in [k for k in _hubs if k[0].is_closed()]:
            del _hubs[dead]
        hub = _hubs[(loop, session_id)] = SessionHub(session_id)
    return hub


def _forget_if_idle(loop: asyncio.AbstractEventLoop, hub: SessionHub) -> None:
    key = (loop, hub.session_id)
    if hub.idle and _hubs.get(key) is hub:
        del _hubs[key]


class Subscription:
    r"""One subscriber's place in its session's hub and, when it has an ``owner``, one of
    that user's stream slots: both held from :func:`join` until :meth:`close`, which
    gives them back once, however often and from wherever it is called.

    A response that carries a subscription may be dropped by the server unsent (a
    client that goes away while the response passes the middleware: Django then
    neither iterates nor closes it). :func:`join`'s ``claim_within`` covers that:
    unless the response :meth:`claim`\ s the subscription in time, it closes itself.
    """

    def __init__(
        self,
        hub: SessionHub,
        subscriber: Subscriber,
        loop: asyncio.AbstractEventLoop,
        *,
        face: str = "socket",
    ) -> None:
        self.hub = hub
        self.subscriber = subscriber
        self.loop = loop
        self.face = face  # which face streams it: the forge_streams_open gauge's label
        self._counted = True  # counted in forge_streams_open until closed
        metrics.stream_opened(face)
        self._owner: int | None = None  # set once the owner's slot is taken
        self._owner_lock = threading.Lock()  # a response's close() runs in a worker thread
        self._left = False  # touched on the loop only, as are the two below
        self._closing = False  # a close is scheduled
        self._unclaimed: asyncio.TimerHandle | None = None

    @property
    def session_id(self) -> str:
        return self.hub.session_id

    def claim(self) -> bool:
        """The response took the subscription over (its stream began); False when it was
        closed already (it was not claimed in time)."""
        self._stop_timer()
        return not (self._left or self._closing)

    async def close(self) -> None:
        """Give the slot back, then leave the hub (bounded by ``FORGE_LAYER_TIMEOUT``)."""
        self._give_back()
        self._uncount()
        self._stop_timer()
        if self._left:
            return
        self._left = True
        try:
            await self.hub.leave(self.subscriber)
        finally:
            _forget_if_idle(self.loop, self.hub)

    def close_soon(self) -> None:
        """:meth:`close` from any thread, without waiting: the slot at once, the hub on the
        subscription's loop (nothing to leave when that loop has ended)."""
        self._give_back()
        self._uncount()
        with contextlib.suppress(RuntimeError):  # a closed loop: its hubs went with it
            self.loop.call_soon_threadsafe(self._close_in_background)

    def _close_in_background(self) -> None:
        if self._left or self._closing:
            return
        self._closing = True
        task = self.loop.create_task(self.close())
        _background_closes.add(task)
        task.add_done_callback(_background_closes.discard)

    def _stop_timer(self) -> None:
        if self._unclaimed is not None:
            self._unclaimed.cancel()
            self._unclaimed = None

    def _uncount(self) -> None:
        with self._owner_lock:
            counted, self._counted = self._counted, False
        if counted:
            metrics.stream_closed(self.face)

    def _give_back(self) -> None:
        with self._owner_lock:
            owner, self._owner = self._owner, None
        if owner is not None:
            limits.give_back(owner)


async def join(
    session_id: str,
    *,
    owner: int | None = None,
    claim_within: float | None = None,
    face: str = "socket",
) -> Subscription:
    """Subscribe to the session's frames (from now on) and, for an ``owner``, take one of
    their stream slots, in that order: a slot is only ever held by an open subscription.

    Raises ``TooManyStreams`` when the owner holds ``FORGE_MAX_STREAMS_PER_USER``
    streams already (checked first, without touching the layer), and
    ``StreamUnavailable`` when the layer failed or did not answer within
    ``FORGE_LAYER_TIMEOUT``; either way nothing is held. Cancelled, it leaves nothing
    either. ``claim_within``: seconds the subscription waits for :meth:`Subscription.claim`
    before closing itself (for subscriptions handed to a response).
    """
    if owner is not None:
        limits.check(owner)
    loop = asyncio.get_running_loop()
    hub = _hub(loop, session_id)
    subscriber = Subscriber()
    try:
        # The lock too: a leave stuck on a frozen layer holds it.
        async with asyncio.timeout(settings.FORGE_LAYER_TIMEOUT):
            await hub.join(subscriber)
    except Exception as exc:
        _forget_if_idle(loop, hub)
        logger.warning("a stream of session %s could not join its group: %r", session_id, exc)
        raise StreamUnavailable(
            "live updates are unavailable for now (the channel layer does not answer); "
            "try again shortly"
        ) from exc
    except BaseException:
        _forget_if_idle(loop, hub)
        raise
    subscription = Subscription(hub, subscriber, loop, face=face)
    try:
        if owner is not None:
            limits.take(owner)  # may refuse still, if another stream took the last slot
            subscription._owner = owner
    except BaseException:
        await subscription.close()
        raise
    if claim_within is not None:
        subscription._unclaimed = loop.call_later(claim_within, subscription._close_in_background)
    return subscription


@contextlib.asynccontextmanager
async def subscribe(session_id: str, *, owner: int | None = None) -> AsyncIterator[Subscriber]:
    """Receive the session's frames (from the moment this is entered) while inside
    (:func:`join`, then :meth:`Subscription.close` on the way out)."""
    subscription = await join(session_id, owner=owner)
    try:
        yield subscription.subscriber
    finally:
        await subscription.close()


def subscribed_sessions() -> list[str]:
    """The sessions the running loop's hubs are subscribed to (for tests and checks)."""
    loop = asyncio.get_running_loop()
    return [session_id for (owner, session_id) in _hubs if owner is loop]


def receiving(session_id: str) -> asyncio.Task[None] | None:
    """The task receiving the session's frames for the running loop's hub, while it has
    subscribers."""
    hub = _hubs.get((asyncio.get_running_loop(), session_id))
    return hub.pumping if hub is not None else None
