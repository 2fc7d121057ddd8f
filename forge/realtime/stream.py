"""One client's view of a session's stream: the log after a seq, then what is still
streaming, then live frames, with no gap and no duplicate (CONTRACT §4).

The WebSocket consumer, the SSE view and the AI SDK's chat routes all read it through
:func:`live_frames`, the one loop (wait, resync, heartbeat, forward); they only encode
what it yields. It drives :class:`SessionStream`:

1. subscribe to the session's group first (live frames queue up meanwhile);
2. :meth:`SessionStream.backlog`: every durable event after ``after``, read from
   the log, then a ``part.snapshot`` for each part still streaming;
3. :meth:`SessionStream.accept` for every live frame: durable events at or below
   the last seq sent are dropped, and a seq gap (the channel layer drops frames
   when a group is full) is filled from the log; deltas already covered by a
   snapshot (or sent before) are dropped or trimmed, and an offset gap is
   answered with a fresh snapshot of that part.

So a client receives every durable event exactly once, in seq order, and the
text of a streaming part without holes or repeats, whatever the layer dropped.

A gap is only visible when a later event arrives; to catch the loss of the last
events of a reply, the stream checks the log again (:meth:`SessionStream.resync`)
when an ``idle`` status arrives and when live frames have gone quiet for a while
after some activity (:func:`live_frames`'s timer; ``needs_resync`` says when). A reply's
end sent without the ``idle`` status after it (lost with the tail, and in no log) is
followed by the session's status once no runner holds it (``status_owed``). While
a turn the stream saw start has not ended, it checks again after every quiet period,
backing off to ``RESYNC_BACKOFF_MAX``: a channel layer that lost everything from some
point on (Redis crashed, and this process's subscription did not come back) still
leaves the client the whole reply, from the log.

A stream that saw no activity has nothing to compare: when the process's subscription
reconnects after a failure (``forge.pubsub``), the hub puts a ``resync`` marker in
every subscriber's queue, and the stream reads the log after its last seq and sends
the session's status as read now (a turn that ran and ended during the outage; QA).
And a Redis that froze and resumed drops no connection: a stream that is quiet and saw
no turn open reads the log after its last seq every ``FORGE_STREAM_RECHECK_SECONDS``
(:meth:`SessionStream.catch_up`), so a turn whose every frame was lost reaches it then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from channels.db import database_sync_to_async
from django.conf import settings

from forge import runtime
from sessions import selectors
from sessions.exceptions import InvalidCursor
from sessions.frames import Frame, event_frame, snapshot_frame, status_frame
from sessions.models import Session

SnapshotSource = Callable[[str], Awaitable[list[dict[str, Any]]]]

REPLAY_PAGE = 500
# Finished parts a stream remembers (see ``SessionStream.ended``). A delta still queued
# for a part when its end was sent is behind at most the parts that ended after it in
# that short window, never a thousand of them.
ENDED_KEPT = 1024
RESYNC_BACKOFF_MAX = 30.0  # seconds between checks of the log while a turn is open


def check_after(session: Session, after: int) -> None:
    """Refuse an ``after`` past the log's head (``InvalidCursor``: 400, or the socket's
    4400): such a stream would drop every durable event up to ``after`` as already
    sent, so its client would silently miss what comes next. (Synchronous: one query.)"""
    if after == 0:
        return
    head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    if after > head:
        raise InvalidCursor(f"after ({after}) is past the session's last seq ({head})")


@dataclass
class StreamStats:
    events_repaired: int = 0  # durable events fetched from the log to fill a seq gap
    snapshots_repaired: int = 0  # snapshots sent to fill an offset gap
    deltas_dropped: int = 0  # duplicates (already covered)


@dataclass
class SessionStream:
    session: Session
    after: int
    snapshots: SnapshotSource
    last_seq: int = 0
    # Streaming parts: how much of each part's text this client has.
    sent: dict[str, int] = field(default_factory=dict)
    # Parts whose end (or removal) this client was sent: their whole text is in that
    # event, so no delta or snapshot of theirs follows it. The hub's queue can still
    # hold a part's deltas when the backlog already sent its end, and the writer drops
    # a finished part's buffer only once the end is written (a snapshot of it then is
    # stale, even empty). The newest ``ENDED_KEPT`` ids, oldest first; emptied when the
    # session goes idle, since the turn's producer sent every frame of its parts before
    # its ``idle`` status (one sender's frames reach a group in order).
    ended: dict[str, None] = field(default_factory=dict)
    stats: StreamStats = field(default_factory=StreamStats)
    # Live frames arrived since the log was last checked for a lost tail.
    needs_resync: bool = False
    # A turn this stream saw start (a ``busy`` or ``retry`` status, a reply logged open)
    # and not end (``idle``, the reply's completion): while so, the log is checked again
    # after every quiet period, not only the first: the channel layer may have lost
    # everything from some point on (a Redis crash), the ``idle`` status included.
    turn_open: bool = False
    # A turn's end (its reply's completion) this client was sent without the ``idle``
    # status that follows it: the layer may have lost that status with the reply's
    # tail, which the stream read from the log, and the status is in no log. Until a
    # status is sent, the session's own is read when the stream is quiet, and said
    # once idle (:meth:`owed_status`): a client whose busy state is the status showed
    # the turn running until the next one (QA).
    status_owed: bool = False

    def __post_init__(self) -> None:
        self.last_seq = self.after

    # --- the backlog ------------------------------------------------------------------

    async def backlog(self) -> list[Frame]:
        """Durable events after ``after``, then snapshots of parts still streaming."""
        frames = await self._events_after(self.last_seq)
        for frame in frames:
            self._note_event(frame)
        # A reply logged open: the log is checked when live frames go quiet, as for a
        # turn seen starting live; none may come (QA: its lost end never arrived).
        self.needs_resync = self.turn_open
        frames += await self._snapshots(only=None)
        return frames

    async def status(self) -> Frame:
        """The ``session.status`` frame the socket and the SSE stream send after their
        backlog (:meth:`status_now`), from ``forge.runtime.is_busy`` read now."""
        busy = await database_sync_to_async(runtime.is_busy)(
            session_id=self.session.pk, tenant_id=self.session.tenant_id
        )
        return self.status_now(busy=busy)

    def status_now(self, *, busy: bool) -> Frame:
        """The ``session.status`` frame sent after the backlog: ``busy`` while a live
        runner holds the session's lease (``forge.runtime.is_busy``, read after the
        subscription opened, so a later change follows it live), else ``idle``. A turn
        retrying reads as ``busy`` until its next ``retry`` frame. A busy session opens
        the turn for this stream, whose start the backlog (after ``after``) may not hold,
        and the log is checked when live frames go quiet: a stream opened mid-turn that
        got no live frame after (a tool running, then the reply's last frames lost)
        never looked, and its client showed the turn running until the next one (QA).
        An idle one closes what the backlog opened (a reply suspended on an approval, or
        a dead process's, not finalized yet): no turn runs, the quiet catch-up reads
        whatever comes of it."""
        self.turn_open = self.needs_resync = busy
        self.status_owed = False
        return status_frame(self.session.pk, "busy" if busy else "idle")

    async def _events_after(self, seq: int, upto: int | None = None) -> list[Frame]:
        frames: list[Frame] = []
        while True:
            page = await database_sync_to_async(selectors.events_after)(
                tenant=self.session.tenant, session_id=self.session.pk, after=seq, limit=REPLAY_PAGE
            )
            if upto is not None:
                page = [event for event in page if event["seq"] < upto]
            frames += [event_frame(event) for event in page]
            if len(page) < REPLAY_PAGE:
                return frames
            seq = page[-1]["seq"]

    async def _snapshots(self, only: str | None) -> list[Frame]:
        frames = []
        for snapshot in await self.snapshots(self.session.pk):
            if only is not None and snapshot["part_id"] != only:
                continue
            if (frame := self.snapshot_for_client(snapshot)) is not None:
                frames.append(frame)
        return frames

    def snapshot_for_client(self, snapshot: dict[str, Any]) -> Frame | None:
        """The frame of a snapshot for this client (the backlog's, a repair's, or one the
        socket's client asked for), or None for a part whose end this client was sent:
        the in-flight store can still hold such a part (its buffer is dropped only once
        its end is written), stale or empty, and a client applying it after the end
        blanked the finished part (QA: the socket's own ``snapshot`` did not check). None
        too for a snapshot shorter than what this client was sent of the part: a read of
        the store that a delta overtook (the socket forwards while it reads) took the
        client's text back, and this stream's count with it (QA)."""
        if snapshot["part_id"] in self.ended:
            return None
        if len(snapshot["text"]) < self.sent.get(snapshot["part_id"], 0):
            return None
        self.sent[snapshot["part_id"]] = len(snapshot["text"])
        return snapshot_frame(snapshot)

    def _note_event(self, frame: Frame) -> None:
        self.last_seq = max(self.last_seq, frame["seq"])
        if frame["type"] == "message.updated" and frame["data"].get("role") == "assistant":
            was_open, self.turn_open = self.turn_open, not frame["data"].get("completed_at")
            if was_open and not self.turn_open:
                self.status_owed = True
        elif frame["type"] == "part.updated":
            part = frame["data"]
            if part["type"] in ("text", "reasoning"):
                if part.get("time", {}).get("end"):
                    self.sent.pop(part["id"], None)  # finished: its whole text is in the event
                    self._ended(part["id"])
                elif part["id"] not in self.sent and part["id"] not in self.ended:
                    self.sent[part["id"]] = len(part.get("text", ""))
        elif frame["type"] == "part.removed":
            part_id = frame["data"].get("part_id", "")
            self.sent.pop(part_id, None)
            self._ended(part_id)

    def _ended(self, part_id: str) -> None:
        self.ended[part_id] = None
        if len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]

    # --- live frames --------------------------------------------------------------------

    async def accept(self, frame: Frame) -> list[Frame]:
        """What to send the client for one live frame (possibly nothing, possibly more)."""
        self.needs_resync = True
        kind = frame.get("kind")
        if kind == "event":
            return await self._accept_event(frame)
        if kind == "delta":
            return await self._accept_delta(frame)
        if kind == "status" and frame.get("status") == "idle":
            frames = [*await self.resync(), frame]  # a turn ended: nothing of it may be missing
            self.ended.clear()
            self.turn_open = self.needs_resync = self.status_owed = False
            return frames
        if kind == "status":  # busy, retry
            self.turn_open = True
            self.status_owed = False
        if kind == "resync":  # the layer came back: what it lost meanwhile, and the status
            return [*await self.resync(), await self.status_after_outage()]
        return [frame]

    async def status_after_outage(self) -> Frame:
        """The session's status read now (:meth:`status`), after the layer lost frames:
        an ``idle`` status may have been among them, and closes the turn as one would."""
        frame = await self.status()
        if frame["status"] == "idle":
            self.turn_open = self.needs_resync = False
        return frame

    async def owed_status(self) -> Frame | None:
        """The ``idle`` status owed since a turn's end (:attr:`status_owed`), once no
        runner holds the session; None while one still does."""
        busy = await database_sync_to_async(runtime.is_busy)(
            session_id=self.session.pk, tenant_id=self.session.tenant_id
        )
        return None if busy else self.status_now(busy=False)

    async def catch_up(self) -> list[Frame]:
        """For a quiet stream that saw no turn open: the events the log holds after the
        last seq sent, and then the session's status, or nothing when there are none.
        A Redis that froze and resumed (or a partition) drops no connection, so no
        reconnect says to look (``resync`` markers): a whole turn that ran meanwhile
        reached such a stream only with the next turn's events (QA)."""
        missing = await self.resync()
        return [*missing, await self.status_after_outage()] if missing else []

    async def resync(self) -> list[Frame]:
        """Events after the last seq sent that never arrived live (read from the log)."""
        missing = await self._events_after(self.last_seq)
        self.stats.events_repaired += len(missing)
        for event in missing:
            self._note_event(event)
        self.needs_resync = self.turn_open  # look again after the next quiet period
        return missing

    async def _accept_event(self, frame: Frame) -> list[Frame]:
        seq = frame["seq"]
        if seq <= self.last_seq:
            return []
        out: list[Frame] = []
        if seq > self.last_seq + 1:
            missing = await self._events_after(self.last_seq, upto=seq)
            self.stats.events_repaired += len(missing)
            for event in missing:
                self._note_event(event)
            out += missing
        self._note_event(frame)
        out.append(frame)
        return out

    async def _accept_delta(self, frame: Frame) -> list[Frame]:
        part_id, offset, delta = frame["part_id"], frame["offset"], frame["delta"]
        if part_id in self.ended:  # its end was sent, with the whole text
            self.stats.deltas_dropped += 1
            return []
        have = self.sent.get(part_id)
        if have is None:
            # A part this client has not seen start: its text-start event is on its way
            # (events precede their deltas) unless it was dropped; trust offset 0 only.
            if offset != 0:
                return await self._repair(part_id)
            have = 0
        if offset + len(delta) <= have:
            self.stats.deltas_dropped += 1
            return []
        if offset > have:
            return await self._repair(part_id)
        if offset < have:  # overlaps what a snapshot already gave: send the new tail only
            frame = {**frame, "offset": have, "delta": delta[have - offset :]}
        self.sent[part_id] = have + len(frame["delta"])
        return [frame]

    async def _repair(self, part_id: str) -> list[Frame]:
        frames = await self._snapshots(only=part_id)
        if frames:
            self.stats.snapshots_repaired += 1
        return frames


# --- the one loop -----------------------------------------------------------------------


class Heartbeat:
    """What :func:`live_frames` yields when nothing was sent for ``heartbeat`` seconds: the
    HTTP streams encode it as a comment, so proxies and clients see the stream alive."""

    def __repr__(self) -> str:
        return "HEARTBEAT"


HEARTBEAT: Final = Heartbeat()


class Frames(Protocol):
    """Where live frames come from (``forge.realtime.hub.Subscriber``)."""

    async def batch(self) -> list[Frame]: ...


# Raises (``NotAuthenticated``, ``NoTenant``, ``NotFound``) when the stream's caller may
# no longer watch its session.
Recheck = Callable[[], Awaitable[None]]


async def live_frames(
    stream: SessionStream,
    source: Frames,
    *,
    heartbeat: float | None = None,
    replay: bool = True,
    status: bool = False,
    recheck: Recheck | None = None,
) -> AsyncGenerator[Frame | Heartbeat, None]:
    """Everything one client is to be sent, in order: with ``replay``, the backlog
    (:meth:`SessionStream.backlog`: the log after ``after``, then snapshots), and with
    ``status`` too, one ``session.status`` (:meth:`SessionStream.status`: ``busy`` or
    ``idle``, what the session does now); then, for ever, the live frames of ``source``
    through :meth:`SessionStream.accept` (dedupe and repair). ``source`` must be
    subscribed before this starts, so nothing falls between the backlog and the live
    frames.

    When ``source`` has been quiet for ``FORGE_STREAM_RESYNC_SECONDS`` after some
    activity, the log is checked for a lost tail (:meth:`SessionStream.resync`). With
    ``heartbeat`` (seconds), :data:`HEARTBEAT` is yielded whenever nothing at all was
    yielded for that long. With ``recheck``, it is awaited every
    ``FORGE_STREAM_RECHECK_SECONDS`` (at the next frame or quiet period): what it
    raises ends the stream, for its caller to say why. Checked at the opening only, a
    stream went on carrying new prompts and replies to a user whose token was deleted,
    who logged out or left the tenant (QA). It never ends by itself otherwise: the
    caller stops iterating (a reply that is complete, a client gone) and closes it
    (``contextlib.aclosing``).
    """
    if replay:
        for frame in await stream.backlog():
            yield frame
        if status:
            yield await stream.status()
    every = settings.FORGE_STREAM_RESYNC_SECONDS
    quiet = every if heartbeat is None else min(every, heartbeat)
    loop = asyncio.get_running_loop()
    idle_since = loop.time()
    # While a turn is open and the layer silent, the log is checked again and again,
    # each time twice as long after the last check that found nothing (at most
    # RESYNC_BACKOFF_MAX): a tool may run for minutes with nothing to send.
    backoff, resync_at = every, 0.0
    owed_backoff, owed_at = every, 0.0  # the same, for a status owed (and a runner still on)
    recheck_every = settings.FORGE_STREAM_RECHECK_SECONDS
    recheck_at = catch_up_at = loop.time() + recheck_every
    while True:
        if recheck is not None and loop.time() >= recheck_at:
            await recheck()
            recheck_at = loop.time() + recheck_every
        try:
            # Not wait_for: that wraps every wait in a task of its own (per frame and client).
            async with asyncio.timeout(quiet):
                frames = await source.batch()
        except TimeoutError:
            repaired = []
            if stream.needs_resync and loop.time() >= resync_at:
                repaired = await stream.resync()
                backoff = every if repaired else min(backoff * 2, RESYNC_BACKOFF_MAX)
                resync_at = loop.time() + backoff - quiet / 2  # (timeouts fire late)
            elif not stream.turn_open and loop.time() >= catch_up_at:
                # Quiet with no turn seen open: as often as the caller's recheck, one
                # read of the log after the last seq (a turn whose frames were lost).
                repaired = await stream.catch_up()
                catch_up_at = loop.time() + recheck_every
            for frame in repaired:  # activity went quiet, and its tail had been lost
                yield frame
            if stream.status_owed and loop.time() >= owed_at:
                said = await stream.owed_status()
                if said is not None:
                    yield said
                    repaired = [*repaired, said]
                owed_backoff = min(owed_backoff * 2, RESYNC_BACKOFF_MAX)
                owed_at = loop.time() + owed_backoff - quiet / 2
            if repaired:
                idle_since = loop.time()
            elif heartbeat is not None and loop.time() - idle_since >= heartbeat:
                idle_since = loop.time()
                yield HEARTBEAT
            continue
        idle_since = loop.time()
        backoff, resync_at = every, 0.0
        owed_backoff, owed_at = every, 0.0
        for frame in frames:
            for out in await stream.accept(frame):
                yield out
