"""One core's rolling: claim, snapshot and summarize (:func:`prepare`), commit
(:func:`commit`), release the claim (:func:`release`); :func:`roll` runs them in turn.

Summaries are made with no transaction open; the commit writes the slice, its messages,
the trimmed window and the advanced ``rolled_seq`` in one short transaction (or one
savepoint of a sweep's group), only if the core is still as snapshotted, and the
AfterRolling consumers run after it commits. A rolling killed at any point leaves the
core as it was or fully rolled (the package's docstring has the steps).
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from .. import after_rolling, sql
from ..compressor import TOOL_OUTPUT_CHARS, compress
from ..exceptions import MemoryStoreError, SummarizerEmpty
from ..ids import new_memory_session_id, new_slice_id, new_unit_id
from ..models import MemoryCore
from ..normalize import clean_summary
from ..results import RollingResult
from ..summarizers import (
    Summarizer,
    SummaryFor,
    extractive,
    get_summarizer,
    summarize,
    summarizing_for,
)
from ..times import now_ms
from ..wire import message_wire, slice_fields
from .options import RollingOptions
from .outcome import RollOutcome
from .snapshot import Snapshot, take_snapshot

logger = logging.getLogger("memory.rolling")  # the package's: log lines keep their name

_LOCK = object()  # _write's default: lock the core itself


def commit(
    snapshot: Snapshot,
    summary: str,
    *,
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
            return _write(snapshot, summary)
    with connection.cursor() as cursor:
        batch = sql.Dialect(cursor).batch
    if not batch:  # Django's savepoint: two more statements, local on SQLite
        with transaction.atomic():
            return _write(snapshot, summary, locked=locked)
    return _write(snapshot, summary, locked=locked, savepoint=True)


def _write(
    snapshot: Snapshot,
    summary: str,
    *,
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
        outcome, statements = _plan(snapshot, summary, locked, dialect)
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
    cutoff = snapshot.cutoff
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
        return commit(*work)
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
                who = SummaryFor(snapshot.tenant_id, snapshot.user_id, snapshot.agent)
                with summarizing_for(who):  # a model's summary is billed to them
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
