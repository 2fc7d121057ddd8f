"""A sweep: every due core (or those given) rolled one at a time, their commits grouped.

The rollings of up to :func:`group_size` cores are committed in one transaction, each
core in a savepoint of its own (:class:`_Group`), so one core's failure never costs
another its rolling; claims are always released. The search index is caught up first
and the sweep's new slices are indexed in batches, all of them by the time it returns.
Outcomes are reported in the order of the cores (:class:`SweepReport`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from .. import digest, indexing, search, sql
from ..signals import send_rollings_done
from ..summarizers import Summarizer
from ..times import now_ms
from .options import RollingOptions, candidate_core_ids
from .outcome import RollOutcome, Status
from .steps import _LOCK, Work, commit, prepare, release, roll

logger = logging.getLogger("memory.rolling")  # the package's: log lines keep their name


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
            return commit(*item)
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
    # The search index consumer indexes the sweep's new slices in batches (memory.indexing),
    # and the digest consumer checks the rolled cores in batches (memory.digest); what is
    # left is done when the block exits, before the report.
    emit = partial(_emit, report, on_outcome)
    group = _Group(options=options, size=1 if dry_run else group_size())
    with indexing.batched(), digest.batched():
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
