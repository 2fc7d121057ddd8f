"""Coalescing a reply's deltas at the source, in short time windows.

A model streams tokens at whatever rate it likes; every frame it becomes costs
the same fixed price on its way to a socket (the Redis mirror, the bus outbox,
the channel layer's send and receive, the hub's fan-out, the socket's write).
So the processor does not publish each delta: it hands it to the turn's
:class:`DeltaWindow`, which keeps the text of each streaming part that has not
been published yet, and a per-event-loop :class:`_Ticker` publishes every
window with pending text once per ``FORGE_DELTA_WINDOW_MS``: one Redis
pipeline for the mirror of every part of every turn of the process, then one
``part.delta`` frame per part carrying the concatenated text at the offset of
its first character. A stream therefore sends at most ``1000 / window`` frames
per second and part, whatever the model's token rate, and a delta waits at
most one window.

Invariants (what clients rely on, unchanged from one frame per delta):

* a part's frames are published in order, each starting where the previous
  one ended (contiguous offsets): ticks send one after the other, and a window
  flushing itself first waits for the tick that holds its earlier text;
* the in-flight buffer takes every delta at once (offsets, the text a part is
  closed with, and an aborted reply's text are the buffer's); the Redis mirror
  gets a window's text *before* its frame is published, so a snapshot covers
  every frame a subscriber may have missed;
* :meth:`DeltaWindow.flush` publishes everything pending and returns once it
  is in the bus's outbox. The processor calls it before every write to the log
  (a part's end, a tool call, a step's start and end) and the turn before it is
  finalized (abort, failure), so frames and events keep the order in which the
  model produced them, and an aborted reply's stored text is exactly what
  clients were sent.

``FORGE_DELTA_WINDOW_MS = 0`` publishes every delta as it comes (no window).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from django.conf import settings

from sessions import services
from sessions.models import Session

from .inflight import mirror

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    offset: int  # of the first pending character in the part's text
    pieces: list[str] = field(default_factory=list)


Batch = dict[str, _Pending]  # part id -> its pending text


def window_seconds() -> float:
    return max(float(settings.FORGE_DELTA_WINDOW_MS), 0.0) / 1000.0


async def _finish(work: Awaitable[None]) -> None:
    """Await ``work``; if cancelled meanwhile, let it finish first (a taken window must
    reach the bus, or its text would be missing from the frames clients were sent)."""
    future = asyncio.ensure_future(work)
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        raise


class DeltaWindow:
    """The deltas of one turn's streaming parts not yet published."""

    def __init__(
        self,
        *,
        session: Session,
        message_id: str,
        window: float | None = None,
        holds: Callable[[], bool] | None = None,
        confirm: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.session = session
        # Whether the turn still holds its session's lease: once it may not, its text
        # is dropped, neither mirrored nor published (another process may have
        # finalized the reply, and clients would get text the log never has).
        # ``confirm``: the same, waiting for a renewal on its way past the deadline
        # (``Turn.confirm_lease``), asked before anything is mirrored or published.
        self.holds = holds or (lambda: True)
        self.confirm = confirm or _always
        self.message_id = message_id
        self.window = window_seconds() if window is None else window
        self.pending: Batch = {}
        self.lock = asyncio.Lock()  # held while the window sends its own text
        self.busy: asyncio.Task[None] | None = None  # the ticker's send of this window's text
        self.frames = 0  # frames published, for tests and benchmarks
        self.deltas = 0

    async def add(self, part_id: str, offset: int, delta: str) -> None:
        """Take a delta that starts at ``offset`` of its part's text (the buffer's)."""
        self.deltas += 1
        if self.window <= 0:
            async with self.lock:
                await _finish(self._send({part_id: _Pending(offset, [delta])}))
            return
        pending = self.pending.get(part_id)
        if pending is None:
            self.pending[part_id] = _Pending(offset, [delta])
            _ticker(self.window).watch(self)
        else:
            pending.pieces.append(delta)

    async def flush(self) -> None:
        """Publish everything pending now; return once it is in the bus's outbox (after
        any send of this window's earlier text the ticker has under way)."""
        async with self.lock:
            busy = self.busy
            if busy is not None and not busy.done():
                await asyncio.wait({busy})
            batch = self.take()
            if batch:
                await _finish(self._send(batch))

    def take(self) -> Batch:
        batch, self.pending = self.pending, {}
        return batch

    async def _send(self, batch: Batch) -> None:
        if not await self.confirm():
            return
        texts = _texts(batch)
        shared = mirror()
        if shared is not None:  # in Redis before it is published: snapshots never miss it
            await shared.append_many(texts, _starts(batch))
        await self.publish(batch, texts)

    async def publish(self, batch: Batch, texts: dict[str, str]) -> None:
        """Publish ``batch``, each frame only once the lease is confirmed at that moment:
        the loop may freeze at any await before it (the mirror's append, an earlier
        frame), and a lease confirmed before the freeze proves nothing after it (a
        loaded CI pass: a window confirmed, then frozen past its lease during the
        mirror's append, published its text of a reply another process had finalized)."""
        for part_id, pending in batch.items():
            if not await self.confirm():
                return
            self.frames += 1
            await services.apublish_delta(
                session=self.session,
                message_id=self.message_id,
                part_id=part_id,
                field="text",
                offset=pending.offset,
                delta=texts[part_id],
            )


async def _always() -> bool:
    return True


def _texts(batch: Batch) -> dict[str, str]:
    return {part_id: "".join(p.pieces) for part_id, p in batch.items()}


def _starts(batch: Batch) -> dict[str, int]:
    return {part_id: p.offset for part_id, p in batch.items()}


class _Ticker:
    """Publishes the pending text of every window of one event loop, once per period.

    One timer, one task and one Redis pipeline per tick for all the turns the
    loop runs, instead of one of each per delta. A tick takes the windows' text
    at once (synchronously) and its task sends after the previous tick's task
    has sent, so a part's text reaches Redis and the bus in order; a window
    that is flushing itself is skipped (it sends its own text).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, period: float) -> None:
        self.loop = loop
        self.period = period
        self.windows: dict[DeltaWindow, None] = {}  # ordered: first pending, first sent
        self.timer: asyncio.TimerHandle | None = None
        self.last: asyncio.Task[None] | None = None

    def watch(self, window: DeltaWindow) -> None:
        self.windows[window] = None
        if self.timer is None:
            self.timer = self.loop.call_later(self.period, self._tick)

    def _tick(self) -> None:
        self.timer = None
        windows, self.windows = self.windows, {}
        batches = []
        for window in windows:
            if window.lock.locked():
                continue
            batch = window.take()
            if batch and window.holds():
                batches.append((window, batch))
        if not batches:
            return
        task = self.last = self.loop.create_task(self._send(batches, self.last))
        for window, _ in batches:
            window.busy = task

    async def _send(
        self, batches: list[tuple[DeltaWindow, Batch]], previous: asyncio.Task[None] | None
    ) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait({previous})
        try:
            batches = [(window, batch) for window, batch in batches if await window.confirm()]
            texts = [_texts(batch) for _, batch in batches]
            shared = mirror()
            if shared is not None:
                merged: dict[str, str] = {}
                starts: dict[str, int] = {}
                for some, (_, batch) in zip(texts, batches, strict=True):
                    merged.update(some)
                    starts.update(_starts(batch))
                await shared.append_many(merged, starts)
            for (window, batch), some in zip(batches, texts, strict=True):
                await window.publish(batch, some)  # confirms each frame's lease
        except Exception:
            logger.exception("could not publish a window of deltas")


_tickers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticker] = (
    weakref.WeakKeyDictionary()
)


def _ticker(period: float) -> _Ticker:
    loop = asyncio.get_running_loop()
    ticker = _tickers.get(loop)
    if ticker is None or ticker.period != period:
        ticker = _tickers[loop] = _Ticker(loop, period)
    return ticker
