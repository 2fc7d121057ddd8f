"""DialogRolling: from the dialogue window to a unit's messages and a slice.

Two triggers (the seed's ``triggerRolling(false|true)``):

* ``threshold`` — the window holds ``threshold`` messages or more: roll the
  window's messages except the ``keep`` most recent, which stay in the window
  *not rolled* (the next rolling's increment starts with them);
* ``idle`` — no interaction for ``idle_after``: roll it all, empty the window
  and start a new memory session, so the next dialogue goes to a new unit.

(``manual`` is a rolling asked for by an operator: like ``threshold``, whatever
the window's size.)

Invariant after every rolling: the window holds exactly the messages no unit
holds (``rolled_seq == window_next_seq - window_count``). So the runtime can
show the model the ``dialog_history`` summaries *in place of* the rolled turns
plus the ``keep`` newest messages verbatim, and no turn reaches the model both
raw and summarized (the session's log records that cut: ``forge.context``).

The steps of one rolling (:func:`roll`):

1. claim the core (PostgreSQL: a session advisory lock, so two rollers never
   summarize one core twice; released by the database if the process dies);
2. snapshot the window and resolve the increment — the window's messages with
   ``seq`` in ``[rolled_seq, cutoff)``, where the cutoff is ``next_seq - keep``
   (``next_seq`` when idle) — with no transaction open; an empty increment is
   ``not_due``;
3. MessageCompressor, then MessageSummarizer, still with no transaction open
   (SQLite has one writer: chat must not wait for a model);
4. commit, in one short transaction, after locking the core row (``FOR UPDATE
   SKIP LOCKED`` on PostgreSQL) and re-checking that the increment is still the
   one summarized (else the core is skipped, nothing written):
   ``update_memory_unit`` (the increment appended to the unit, a slice covering
   exactly its range), the window trimmed below the cutoff, ``rolled_seq`` set
   to the cutoff (and the memory session renewed when idle);
5. after commit, the AfterRolling consumers with the ``RollingResult``.

A rolling killed at any point leaves the core as it was (before 4 commits) or
fully rolled (after): the slice, its messages, the trimmed window and the
advanced ``rolled_seq`` are written together or not at all.

Cores rolled before this rule kept their ``keep`` newest messages in the
window *after* rolling them (``rolled_seq`` above the window's first seq). The
next rolling of such a core trims those too, so the invariant holds from then
on; an idle rolling of a window that holds only such messages trims it and
renews the session without a slice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from django.conf import settings
from django.db import connection, transaction

from . import after_rolling, indexing, search, sql
from .compressor import TOOL_OUTPUT_CHARS, compress
from .exceptions import InvalidRollingOption, MemoryStoreError, SummarizerEmpty
from .ids import new_memory_session_id, new_slice_id, new_unit_id
from .models import MemoryCore
from .normalize import Msg, clean_summary
from .results import RollingResult, Trigger
from .signals import send_rollings_done
from .summarizers import Summarizer, extractive, get_summarizer, summarize
from .times import now_ms
from .wire import message_wire, slice_fields

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLD = 40
DEFAULT_KEEP = 8
DEFAULT_IDLE_AFTER = 1800.0

Status = Literal["rolled", "would_roll", "not_due", "busy", "changed", "missing", "failed"]


@dataclass(frozen=True)
class RollingOptions:
    threshold: int
    keep: int  # messages left unrolled in the window; at most threshold - 1
    idle_after: timedelta

    @classmethod
    def build(
        cls,
        *,
        threshold: int | None = None,
        keep: int | None = None,
        idle_after: timedelta | float | None = None,
    ) -> RollingOptions:
        """Options from the arguments given, the others from settings; validated."""
        if threshold is None:
            threshold = getattr(settings, "FORGE_MEMORY_ROLL_THRESHOLD", DEFAULT_THRESHOLD)
        if keep is None:
            keep = getattr(settings, "FORGE_MEMORY_ROLL_KEEP", DEFAULT_KEEP)
        if idle_after is None:
            idle_after = getattr(settings, "FORGE_MEMORY_IDLE_AFTER", DEFAULT_IDLE_AFTER)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise InvalidRollingOption(f"threshold must be a positive integer, got {threshold!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidRollingOption(f"keep must be a non-negative integer, got {keep!r}")
        if not isinstance(idle_after, timedelta):
            if isinstance(idle_after, bool) or not isinstance(idle_after, int | float):
                raise InvalidRollingOption("idle_after must be a number of seconds")
            idle_after = timedelta(seconds=idle_after)
        if idle_after <= timedelta(0):
            raise InvalidRollingOption("idle_after must be positive")
        return cls(threshold=threshold, keep=min(keep, threshold - 1), idle_after=idle_after)


@dataclass
class RollOutcome:
    """What happened to one core. ``error`` is ``{code, message}`` when it failed."""

    core_id: str
    status: Status
    trigger: Trigger | None = None
    messages: int = 0  # the increment: messages appended to the unit
    trimmed: int = 0  # messages removed from the window
    unit_id: str | None = None
    slice_id: str | None = None
    memory_session_id: str | None = None  # the core's, after rolling
    error: dict[str, str] | None = None
    result: RollingResult | None = field(default=None, repr=False)

    def wire(self) -> dict[str, Any]:
        return {
            "core": self.core_id,
            "status": self.status,
            "trigger": self.trigger,
            "messages": self.messages,
            "trimmed": self.trimmed,
            "unit": self.unit_id,
            "slice": self.slice_id,
            "memory_session_id": self.memory_session_id,
            "error": self.error,
        }


@dataclass(frozen=True)
class Snapshot:
    core_id: str
    tenant_id: int
    user_id: int
    agent: str
    memory_session_id: str
    rolled_seq: int
    next_seq: int
    window_count: int
    trigger: Trigger
    increment: list[Msg]
    trimmed: int  # how many window messages the commit will remove

    @property
    def window_start(self) -> int:
        """The seq of the window's oldest message (the window is the run of seqs
        ``[next_seq - window_count, next_seq)``)."""
        return self.next_seq - self.window_count

    def cutoff(self, keep: int) -> int:
        """The new ``rolled_seq``: messages with ``seq`` below it are rolled (the
        increment is ``[rolled_seq, cutoff)``) and leave the window. Idle: all of them;
        else all but the ``keep`` newest. Never below ``rolled_seq``."""
        if self.trigger == "idle":
            return self.next_seq
        return max(self.rolled_seq, self.next_seq - keep)


# --- candidates -------------------------------------------------------------------------------


def due(
    *,
    window_count: int,
    last_interaction_at: datetime | None,
    options: RollingOptions,
    now: datetime,
    force: bool = False,
) -> Trigger | None:
    if window_count <= 0:
        return None
    if last_interaction_at is not None and last_interaction_at <= now - options.idle_after:
        return "idle"
    if window_count >= options.threshold:
        return "threshold"
    return "manual" if force else None


def candidate_core_ids(*, options: RollingOptions, now: datetime) -> list[str]:
    """Cores over the threshold or idle with a non-empty window, by id.

    Two queries on the partial indexes ``memorycore_window`` and ``memorycore_idle``
    (only cores with a non-empty window are in them): no scan of cores or messages.
    """
    busy = MemoryCore.objects.filter(window_count__gt=0)
    over = busy.filter(window_count__gte=options.threshold).values_list("pk", flat=True)
    idle = busy.filter(last_interaction_at__lte=now - options.idle_after).values_list(
        "pk", flat=True
    )
    return sorted({*over, *idle})


# --- one core -----------------------------------------------------------------------------------


def take_snapshot(
    core_id: str,
    *,
    options: RollingOptions,
    now: datetime,
    force: bool = False,
    core: sql.CoreRow | None = None,
    window: list[tuple[int, Msg]] | None = None,
) -> Snapshot | RollOutcome:
    """The core's window as it is, and what a rolling would do (no transaction, no lock).

    ``core`` is the core's row when the caller read it already, and ``window`` its
    window's messages from ``rolled_seq`` on, with their seq
    (:func:`memory.sql.claim_and_read_window`).
    """
    with connection.cursor() as cursor:
        if core is None:
            core = sql.read_core(cursor, core_id)
        if core is None:
            return RollOutcome(core_id, "missing")
        trigger = due(
            window_count=core.window_count,
            last_interaction_at=core.last_interaction_at,
            options=options,
            now=now,
            force=force,
        )
        if trigger is None:
            return RollOutcome(core_id, "not_due")
        snapshot = Snapshot(
            core_id=core_id,
            tenant_id=core.tenant_id,
            user_id=core.user_id,
            agent=core.agent,
            memory_session_id=core.memory_session_id,
            rolled_seq=core.rolled_seq,
            next_seq=core.window_next_seq,
            window_count=core.window_count,
            trigger=trigger,
            increment=[],
            trimmed=0,
        )
        cutoff = snapshot.cutoff(options.keep)
        trimmed = max(0, cutoff - snapshot.window_start)
        # An empty increment is not due; only an idle rolling may trim a window that
        # holds nothing unrolled (kept by a rolling of before the invariant) and renew.
        if cutoff <= snapshot.rolled_seq and not (trigger == "idle" and trimmed):
            return RollOutcome(core_id, "not_due", trigger=trigger)
        if window is None:
            increment = sql.read_window(cursor, core_id, core.rolled_seq, cutoff)
        else:
            increment = [m for seq, m in window if core.rolled_seq <= seq < cutoff]
    return replace(snapshot, increment=increment, trimmed=trimmed)


_LOCK = object()  # _write's default: lock the core itself


def commit(
    snapshot: Snapshot,
    summary: str,
    *,
    options: RollingOptions,
    grouped: bool = False,
    locked: Any = _LOCK,
) -> RollOutcome:
    """Step 4: write the rolling if the core is still as snapshotted; else skip it.

    In a transaction of its own; ``grouped``: in a savepoint of the caller's transaction
    (a sweep's group), so that a failure undoes this core's writes alone. ``locked`` is
    the core's row as the caller locked it in that transaction (``None``: it could not).
    """
    if not grouped:
        with transaction.atomic():
            return _write(snapshot, summary, options=options)
    with connection.cursor() as cursor:
        batch = sql.Dialect(cursor).batch
    if not batch:  # Django's savepoint: two more statements, local on SQLite
        with transaction.atomic():
            return _write(snapshot, summary, options=options, locked=locked)
    return _write(snapshot, summary, options=options, locked=locked, savepoint=True)


def _write(
    snapshot: Snapshot,
    summary: str,
    *,
    options: RollingOptions,
    locked: Any = _LOCK,
    savepoint: bool = False,
) -> RollOutcome:
    """The writes, in the caller's transaction. With ``savepoint`` (PostgreSQL), they are
    sent between a savepoint and its release, in their one round trip, and the
    savepoint is rolled back to if they fail."""
    with connection.cursor() as cursor:
        dialect = sql.Dialect(cursor)
        if locked is _LOCK:
            locked = sql.lock_core(cursor, dialect, snapshot.core_id, skip_locked=True)
        outcome, statements = _plan(snapshot, summary, locked, options, dialect)
        if savepoint and statements:
            statements = [sql.savepoint(), *statements, sql.release_savepoint()]
        try:
            sql.run(cursor, dialect, statements)
        except BaseException:
            if savepoint and statements:
                try:
                    sql.rollback_savepoint(cursor)
                except Exception:
                    logger.exception("rolling core %s: no savepoint to undo", snapshot.core_id)
            raise
    if outcome.result is not None:
        transaction.on_commit(partial(after_rolling.trigger, outcome.result))
    return outcome


def _plan(
    snapshot: Snapshot,
    summary: str,
    locked: sql.Locked | None,
    options: RollingOptions,
    dialect: sql.Dialect,
) -> tuple[RollOutcome, list[sql.Statement]]:
    """The outcome of committing ``snapshot`` on the core as ``locked``, and the
    statements that write it (none when the core is skipped)."""
    core_id = snapshot.core_id
    now = now_ms()
    if locked is None:
        gone = not MemoryCore.objects.filter(pk=core_id).exists()
        return RollOutcome(core_id, "missing" if gone else "busy"), []
    if (
        locked.rolled_seq != snapshot.rolled_seq
        or locked.memory_session_id != snapshot.memory_session_id
        or (snapshot.trigger == "idle" and locked.window_next_seq != snapshot.next_seq)
    ):
        return RollOutcome(core_id, "changed", trigger=snapshot.trigger), []
    statements: list[sql.Statement] = []
    unit_id = locked.unit_id or new_unit_id()
    slice_id = new_slice_id()
    start = locked.unit_message_count
    if snapshot.increment:
        statements += sql.append_to_unit(
            dialect,
            core_id=core_id,
            locked=locked,
            unit_id=unit_id,
            slice_id=slice_id,
            messages=snapshot.increment,
            summary=summary,
            now=now,
        )
    # The window is the run of seqs [next - count, next): what the cutoff removes is
    # known. The cutoff is the snapshot's: messages that arrived since stay unrolled.
    cutoff = snapshot.cutoff(options.keep)
    trimmed = max(0, cutoff - (locked.window_next_seq - locked.window_count))
    session_id = new_memory_session_id() if snapshot.trigger == "idle" else locked.memory_session_id
    statements += sql.advance_window(
        dialect,
        core_id=core_id,
        rolled_seq=cutoff,
        trimmed=trimmed,
        memory_session_id=session_id,
        now=now,
    )
    outcome = RollOutcome(
        core_id,
        "rolled",
        trigger=snapshot.trigger,
        messages=len(snapshot.increment),
        trimmed=trimmed,
        memory_session_id=session_id,
    )
    if not snapshot.increment:
        return outcome, statements
    outcome.unit_id, outcome.slice_id = unit_id, slice_id
    outcome.result = RollingResult(
        tenant_id=snapshot.tenant_id,
        core_id=core_id,
        user_id=snapshot.user_id,
        agent=snapshot.agent,
        trigger=snapshot.trigger,
        unit_id=unit_id,
        memory_session_id=locked.memory_session_id,
        next_memory_session_id=session_id,
        slice=slice_fields(
            slice_id=slice_id,
            start_index=start,
            end_index=start + len(snapshot.increment),
            summary=summary,
            created_at=now,
        ),
        messages=tuple(message_wire(m) for m in snapshot.increment),
        trimmed=trimmed,
    )
    return outcome, statements


def roll(
    core_id: str,
    *,
    options: RollingOptions,
    now: datetime | None = None,
    force: bool = False,
    dry_run: bool = False,
    summarizer: Summarizer | None = None,
) -> RollOutcome:
    """Roll one core if it is due (or, with ``force``, whatever it holds not yet rolled).

    ``now`` is the time the idle trigger measures from (default: now). Statuses:
    ``rolled``; ``would_roll`` (``dry_run``, nothing written, no summarizer call);
    ``not_due``; ``busy`` (another roller holds it); ``changed`` (the window moved
    while summarizing: skipped, a later sweep rolls it); ``missing``; ``failed``
    (the summarizer failed: ``error`` says how; the core is untouched).
    """
    now = now or now_ms()
    if dry_run:
        snapshot = take_snapshot(core_id, options=options, now=now, force=force)
        if isinstance(snapshot, RollOutcome):
            return snapshot
        return RollOutcome(
            core_id,
            "would_roll",
            trigger=snapshot.trigger,
            messages=len(snapshot.increment),
            trimmed=snapshot.trimmed,
            memory_session_id=snapshot.memory_session_id,
        )
    held, work = prepare(core_id, options=options, now=now, force=force, summarizer=summarizer)
    try:
        if isinstance(work, RollOutcome):
            return work
        return commit(*work, options=options)
    finally:
        if held:
            release([core_id])


Work = tuple[Snapshot, str]  # a snapshot and its summary, ready to commit


def prepare(
    core_id: str,
    *,
    options: RollingOptions,
    now: datetime,
    force: bool = False,
    summarizer: Summarizer | None = None,
) -> tuple[bool, RollOutcome | Work]:
    """Steps 1-3 (claim, snapshot, summarize), no transaction open: whether the claim is
    held (the caller releases it, :func:`release`), and the outcome if the core is done
    with here, else the work to commit."""
    with connection.cursor() as cursor:
        held, core, window = sql.claim_and_read_window(cursor, sql.Dialect(cursor), core_id)
    if not held:
        return False, RollOutcome(core_id, "busy")
    try:
        snapshot = take_snapshot(
            core_id, options=options, now=now, force=force, core=core, window=window
        )
        if isinstance(snapshot, RollOutcome):
            return True, snapshot
        summary = ""
        if snapshot.increment:
            cap = int(getattr(settings, "FORGE_MEMORY_TOOL_OUTPUT_CHARS", TOOL_OUTPUT_CHARS))
            compressed = compress(snapshot.increment, tool_output_chars=cap)
            try:
                chosen = summarizer or get_summarizer()
                # The built-in extractive summarizer runs inline: it is local and its work
                # is bounded by the increment, so it has nothing to time out, and the hop
                # to the worker thread was ~2 ms a core on a loaded machine.
                timeout = 0.0 if chosen is extractive else None
                summary = _clean(summarize(compressed, summarizer=chosen, timeout=timeout))
            except MemoryStoreError as exc:
                return True, RollOutcome(
                    core_id,
                    "failed",
                    trigger=snapshot.trigger,
                    messages=len(snapshot.increment),
                    error={"code": exc.code, "message": str(exc)},
                )
    except BaseException:
        release([core_id])
        raise
    return True, (snapshot, summary)


def release(core_ids: list[str]) -> None:
    """Release the claims :func:`prepare` took, in one statement."""
    if core_ids:
        with connection.cursor() as cursor:
            sql.release_many(cursor, sql.Dialect(cursor), core_ids)


def _clean(summary: str) -> str:
    text = clean_summary(summary)
    if not text:
        raise SummarizerEmpty("the summarizer returned only white space")
    return text


# --- a sweep ----------------------------------------------------------------------------------


@dataclass
class SweepReport:
    outcomes: list[RollOutcome] = field(default_factory=list)
    candidates: int = 0
    indexed: int = 0  # slices whose summary a previous rolling left out of the index
    elapsed: float = 0.0
    dry_run: bool = False
    stopped: bool = False  # stopped early (SIGTERM)

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def failed(self) -> list[RollOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def wire(self) -> dict[str, Any]:
        statuses: list[Status] = [
            "rolled",
            "would_roll",
            "not_due",
            "busy",
            "changed",
            "missing",
            "failed",
        ]
        return {
            "candidates": self.candidates,
            "dry_run": self.dry_run,
            "stopped": self.stopped,
            "indexed": self.indexed,
            "elapsed": round(self.elapsed, 3),
            "counts": {s: self.count(s) for s in statuses if self.count(s)},
            "cores": [o.wire() for o in self.outcomes],
        }


GROUP_CORES = 16
GROUP_SECONDS = 0.25


def group_size() -> int:
    """Cores whose rollings a sweep commits in one transaction (``FORGE_MEMORY_ROLL_GROUP``)."""
    return max(1, int(getattr(settings, "FORGE_MEMORY_ROLL_GROUP", GROUP_CORES)))


def _failed(core_id: str, exc: BaseException) -> RollOutcome:
    logger.exception("rolling core %s failed", core_id, exc_info=exc)
    return RollOutcome(
        core_id, "failed", error={"code": "error", "message": f"{type(exc).__name__}: {exc}"}
    )


def _emit(
    report: SweepReport, on_outcome: Callable[[RollOutcome], Any] | None, outcome: RollOutcome
) -> None:
    report.outcomes.append(outcome)
    if on_outcome is not None:
        on_outcome(outcome)


class _Group:
    """A sweep's cores prepared (claimed, snapshotted, summarized) and not yet committed.

    :meth:`commit` writes them in one transaction: the cores' rows locked together
    (PostgreSQL, one statement), then each core's rolling in a savepoint of its own
    (:func:`commit` grouped: on PostgreSQL the savepoint, the writes and its release
    are one round trip), so a core that fails rolls back alone and the
    others are written; the transaction's ``COMMIT`` (its WAL flush) is shared. If that
    ``COMMIT`` itself fails (a deferred check, the connection), nothing of the group was
    written, and each core is committed again alone, in its own transaction, from the
    same snapshot and summary (which re-checks the core), so one core's failure never
    costs another its rolling. Every claim is released after, whatever happened.

    A group holds at most ``size`` cores to commit, and no core waits for it more than
    :data:`GROUP_SECONDS` after its summary (a slow summarizer makes groups of one).
    Summaries are never made inside the transaction, and the core rows stay locked
    only for the group's writes. Outcomes are reported in the order of the cores.
    """

    def __init__(self, *, options: RollingOptions, size: int) -> None:
        self.options = options
        self.size = size
        self.entries: list[tuple[str, RollOutcome | Work]] = []
        self.claims: list[str] = []
        self.work = 0
        self.since = 0.0

    def add(self, core_id: str, held: bool, work: RollOutcome | Work) -> None:
        if held:
            self.claims.append(core_id)
        if not isinstance(work, RollOutcome):
            if not self.work:
                self.since = time.monotonic()
            self.work += 1
        self.entries.append((core_id, work))

    def done(self, outcome: RollOutcome) -> None:
        self.entries.append((outcome.core_id, outcome))

    def full(self) -> bool:
        if self.work >= self.size:
            return True
        if self.work and time.monotonic() - self.since >= GROUP_SECONDS:
            return True
        return not self.work and len(self.entries) >= self.size

    def commit(self, emit: Callable[[RollOutcome], Any]) -> None:
        entries, claims = self.entries, self.claims
        self.entries, self.claims, self.work = [], [], 0
        if not entries:
            return
        try:
            outcomes = self._write(entries)
        finally:
            release(claims)
        for outcome in outcomes:
            emit(outcome)

    def _write(self, entries: list[tuple[str, RollOutcome | Work]]) -> list[RollOutcome]:
        work = [w for _, w in entries if not isinstance(w, RollOutcome)]
        written: dict[str, RollOutcome] = {}
        if len(work) == 1:
            written[work[0][0].core_id] = self._alone(work[0])
        elif work:
            try:
                with transaction.atomic():
                    locks = self._lock([item[0].core_id for item in work])
                    for item in work:
                        try:
                            written[item[0].core_id] = commit(
                                *item,
                                options=self.options,
                                grouped=True,
                                locked=locks.get(item[0].core_id, _LOCK),
                            )
                        except Exception as exc:  # rolled back to its savepoint
                            written[item[0].core_id] = _failed(item[0].core_id, exc)
            except Exception:
                logger.exception(
                    "a group of %d rollings failed to commit; committing each alone", len(work)
                )
                written = {item[0].core_id: self._alone(item) for item in work}
        return [w if isinstance(w, RollOutcome) else written[core_id] for core_id, w in entries]

    def _lock(self, core_ids: list[str]) -> dict[str, sql.Locked | None]:
        """PostgreSQL: every core of the group locked in one statement (a core absent
        from the answer is missing or another's: ``None``). SQLite: nothing (each
        core's commit reads its row; the transaction holds the database's lock)."""
        with connection.cursor() as cursor:
            if not sql.Dialect(cursor).postgres:
                return {}
            locks: dict[str, sql.Locked | None] = dict.fromkeys(core_ids)
            locks.update(sql.lock_cores(cursor, core_ids))
            return locks

    def _alone(self, item: Work) -> RollOutcome:
        try:
            return commit(*item, options=self.options)
        except Exception as exc:
            return _failed(item[0].core_id, exc)


def sweep(
    *,
    options: RollingOptions,
    core_ids: list[str] | None = None,
    now: datetime | None = None,
    force: bool = False,
    dry_run: bool = False,
    summarizer: Summarizer | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_outcome: Callable[[RollOutcome], Any] | None = None,
    on_candidates: Callable[[int], Any] | None = None,
) -> SweepReport:
    """Roll every due core (or the ``core_ids`` given), one at a time, committing the
    rollings of up to :func:`group_size` cores in one transaction (:class:`_Group`).

    Catches up the search index first, and indexes the new slices in batches
    (``memory.indexing.batched``): all of them are indexed when it returns. A
    core that fails is reported and the sweep goes on; ``should_stop`` is asked
    between cores.
    """
    started = time.monotonic()
    now = now or now_ms()
    report = SweepReport(dry_run=dry_run)
    if not dry_run:
        report.indexed = search.index_pending()
    ids = candidate_core_ids(options=options, now=now) if core_ids is None else core_ids
    report.candidates = len(ids)
    if on_candidates is not None:
        on_candidates(len(ids))
    # The search index consumer indexes the sweep's new slices in batches (memory.indexing);
    # what is left is indexed when the block exits, before the report.
    emit = partial(_emit, report, on_outcome)
    group = _Group(options=options, size=1 if dry_run else group_size())
    with indexing.batched():
        try:
            for core_id in ids:
                if should_stop():
                    report.stopped = True
                    break
                try:
                    if dry_run:
                        group.done(
                            roll(core_id, options=options, now=now, force=force, dry_run=True)
                        )
                    else:
                        held, work = prepare(
                            core_id, options=options, now=now, force=force, summarizer=summarizer
                        )
                        group.add(core_id, held, work)
                except Exception as exc:  # a bug or the database: report the core, go on
                    group.done(_failed(core_id, exc))
                if group.full():
                    group.commit(emit)
        finally:
            group.commit(emit)
    report.elapsed = time.monotonic() - started
    if not dry_run:
        send_rollings_done(report.outcomes, report.elapsed)
    return report
