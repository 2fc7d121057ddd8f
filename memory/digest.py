"""The history digest: what the ``dialog_history`` block has no room for, condensed.

The block (``selectors.dialog_history_block``) shows the core's newest slices, at most
``FORGE_MEMORY_HISTORY_SLICES`` within ``FORGE_MEMORY_HISTORY_CHARS``, in place of the
rolled turns that the trim hides from the model. Alone, it let the oldest rolled turns of
a long chat (or of the user's other chats with the agent) drop out: shown neither raw
nor summarized (a QA finding, HIGH). So, as compaction folds each summary into the next,
:func:`condense_history` folds the slices the block has no room for into the core's
``history_digest``, which the block shows first. It runs after every rolling that wrote a
slice (:func:`consumer`, an AfterRolling consumer the app registers), outside the
rolling's transaction, and after every slice written without a rolling (a plugin's
``update_memory_unit``, an import's ``restore_unit``: :func:`condense_on_commit`).

Invariants:

* The slices folded are marked ``digested`` in the transaction that writes the digest,
  with the core's row locked (two folds of one core run one after the other), and they
  are exactly those :func:`selectors.fit_history` leaves out, by the rule the block
  applies. So the block shows each rolled slice either on its own line or inside the
  digest, never both, and (while the settings stay as they are) never neither.
* The digest is extractive (``memory.extractive``: the sentences that carry names,
  numbers, dates, places, preferences and plans), whatever summarizer writes the slices:
  offline, deterministic, no model call after the rolling. It is at most
  :func:`digest_chars` characters (a third of the block's budget), so the facts of the
  oldest slices compete for room with each newer fold's; the slices themselves stay in
  memory, found by ``memory_search`` and read by ``memory_read``.
* A failure here never fails the rolling (AfterRolling consumers are isolated), and
  leaves the digest and the slices as they were: the block then leaves the slices out
  and its first line says that older dialogue is not summarized there. The next
  rolling folds them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Length

from .batching import SweepBatch
from .extractive import SPOKEN, extractive
from .models import MemoryCore, MemorySlice, MemoryUnit
from .results import RollingResult
from .selectors import HISTORY_CHARS, fit_history
from .wire import history_digest_line

__all__ = [
    "batched",
    "condense",
    "condense_history",
    "condense_on_commit",
    "consumer",
    "digest_chars",
    "flush",
]

logger = logging.getLogger(__name__)

# A line of a summary: ``user: …`` / ``assistant: …`` (the extractive summary's form);
# any other line is read as a sentence of no speaker.
_SPEAKER = re.compile(r"^(?P<role>user|assistant):\s*(?P<text>.*)$", re.DOTALL)
_NO_SPEAKER = ""


def digest_chars() -> int:
    """The digest's budget: a third of ``FORGE_MEMORY_HISTORY_CHARS`` (at least 200)."""
    budget = int(getattr(settings, "FORGE_MEMORY_HISTORY_CHARS", HISTORY_CHARS))
    return max(budget // 3, 200)


def condense(digest: str | None, oldest_first: Sequence[str]) -> str:
    """The digest of ``digest`` (the earlier one, or None) followed by these summaries:
    the sentences of them all that carry facts, in their order, within
    :func:`digest_chars`. A line that names its speaker keeps the name."""
    messages: list[dict[str, Any]] = []
    for text in [digest or "", *oldest_first]:
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            spoken = _SPEAKER.match(line)
            if spoken:
                messages.append({"role": spoken["role"], "text": spoken["text"]})
            else:
                messages.append({"role": _NO_SPEAKER, "text": line})
    return extractive(messages, budget=digest_chars(), roles=(*SPOKEN, _NO_SPEAKER)).strip()


def condense_history(*, tenant_id: int, core_id: str) -> int:
    """Fold the core's slices that its ``dialog_history`` block has no room for into its
    history digest, and mark them ``digested`` (see the module's invariants). Returns how
    many slices were folded (0: the block holds them all, or the core is gone).

    One query when the block has room for every slice not yet folded, whatever the
    digest (the common case: a rolling of a core with few slices); else a short
    transaction with the core's row locked."""
    if not fit_history(_not_digested(tenant_id, core_id), digest=_LONGEST_DIGEST)[1]:
        return 0
    with transaction.atomic():
        core = (
            MemoryCore.objects.select_for_update()
            .filter(tenant_id=tenant_id, pk=core_id)
            .only("id", "tenant_id", "history_digest", "history_digest_at")
            .first()
        )
        if core is None:
            return 0
        newest_first = _not_digested(tenant_id, core_id)  # again, under the lock
        folded: list[MemorySlice] = []
        while True:
            kept, left_out = fit_history(newest_first, digest=history_digest_line(core))
            if not left_out:
                break
            oldest_first = left_out[::-1]
            digest = condense(core.history_digest, [s.summary for s in oldest_first])
            core.history_digest = digest or _counted(core.history_digest, len(left_out))
            newest = max(s.created_at for s in left_out)
            if core.history_digest_at is None or newest > core.history_digest_at:
                core.history_digest_at = newest
            folded += left_out
            newest_first = kept  # a longer digest may leave less room: fit again
        if not folded:
            return 0
        core.save(update_fields=["history_digest", "history_digest_at"])
        MemorySlice.objects.filter(tenant_id=tenant_id, pk__in=[s.pk for s in folded]).update(
            digested=True
        )
    return len(folded)


class _Longest:
    """Stands for a digest line of the greatest length a digest can have."""

    def __len__(self) -> int:
        return digest_chars() + 80  # the line's ``[until <time>] <head>`` and line break


_LONGEST_DIGEST: Any = _Longest()


def _not_digested(tenant_id: int, core_id: str) -> list[MemorySlice]:
    """The core's slices not folded yet, newest first, in the block's order (the newest
    unit's first). Few rows: every rolling folds what it pushed out of the block."""
    # The tenant through the unit: a slice's own ``tenant_id`` led SQLite's planner to
    # the tenant's index, a scan of all its slices (10,000 cores rolled 5 x slower).
    return list(
        MemorySlice.objects.filter(unit__tenant_id=tenant_id, unit__core_id=core_id, digested=False)
        .only("id", "summary", "created_at")
        .order_by("-unit__updated_at", "-unit_id", "-created_at", "-id")
    )


def _counted(digest: str | None, count: int) -> str:
    """A digest when the summaries gave no sentence that fits (one too long for the
    budget): at least it says how many were folded, within :func:`digest_chars`."""
    note = f"({count} earlier summaries)"
    text = (digest + "\n" if digest else "") + note
    return text if len(text) <= digest_chars() else note


def condense_on_commit(*, tenant_id: int, core_id: str) -> None:
    """:func:`condense_history` once the caller's transaction commits (a slice written
    without a rolling: ``services.update_memory_unit``, ``services.restore_unit``). A
    failure is logged, never raised to the caller: its write is committed by then."""
    transaction.on_commit(
        partial(condense_history, tenant_id=tenant_id, core_id=core_id), robust=True
    )


def consumer(result: RollingResult) -> None:
    """The AfterRolling consumer: fold what the new slice pushed out of the block (now,
    or, within :func:`batched`, with the batch)."""
    if not _batch.open:
        condense_history(tenant_id=result.tenant_id, core_id=result.core_id)
        return
    if _batch.add(result.core_id, result.tenant_id, size=BATCH_CORES, seconds=BATCH_SECONDS):
        flush()


# --- batching over a sweep ------------------------------------------------------------------
#
# Within a sweep (``memory.rolling.sweep`` opens :func:`batched`), the cores wait in a
# per-thread batch, and one query finds which of them the block has no room for: a
# query per core was ~1 ms of a PostgreSQL rolling's ~3.6 (bench/rolling.py). A core
# waits at most BATCH_CORES rollings or BATCH_SECONDS, and never past the sweep.

BATCH_CORES = 64
BATCH_SECONDS = 0.5


_batch: SweepBatch[str, int] = SweepBatch()  # core id -> tenant id, in rolling order


def batched() -> AbstractContextManager[None]:
    """Within, :func:`consumer` collects cores and checks them together; the outermost
    exit folds what is left. Nests; per thread (:mod:`memory.batching`)."""
    return _batch.batched(flush)


def flush() -> int:
    """Fold the cores waiting in this thread's batch that need it; returns how many
    slices were folded. Never raises: a core that fails is logged (its next rolling
    folds it)."""
    cores = _batch.take()
    if not cores:
        return 0
    folded = 0
    try:
        waiting = _not_digested_of(list(cores))
    except Exception:
        logger.exception("memory digest: a batch of %d cores could not be read", len(cores))
        return 0
    for core_id, tenant_id in cores.items():
        if not fit_history(waiting.get(core_id, []), digest=_LONGEST_DIGEST, line_length=_line)[1]:
            continue
        try:
            folded += condense_history(tenant_id=tenant_id, core_id=core_id)
        except Exception:
            logger.exception(
                "memory digest: core %s not folded (its next rolling folds it)", core_id
            )
    return folded


def _not_digested_of(core_ids: list[str]) -> dict[str, list[MemorySlice]]:
    """:func:`_not_digested` of several cores (of any tenants: a sweep's), without their
    summaries: each slice's ``line`` is its line's length in the block.

    Two statements, each led by an index whatever the statistics say: the cores' units
    (``memoryunit_core_updated``), then their slices (``memoryslice_unit_created``). As
    one join, PostgreSQL's planner, whose statistics predated the sweep's new units,
    scanned every slice for each batch (13 ms of 64 cores at 10,000)."""
    units = {
        pk: (core_id, updated_at)
        for pk, core_id, updated_at in MemoryUnit.objects.filter(
            core_id__in=core_ids, slice_count__gt=0
        ).values_list("pk", "core_id", "updated_at")
    }
    if not units:
        return {}
    rows = (
        MemorySlice.objects.filter(unit_id__in=list(units), digested=False)
        .annotate(line=Length("summary") + _LINE_EXTRA)
        .only("id", "unit_id", "created_at")
    )
    found: dict[str, list[MemorySlice]] = {}
    for item in sorted(
        rows,
        key=lambda s: (units[s.unit_id][1], s.unit_id, s.created_at, s.pk),
        reverse=True,
    ):
        found.setdefault(units[item.unit_id][0], []).append(item)
    return found


# ``[<created_at>] `` before a summary in the block (``wire.history_line``): the time is
# always 24 characters (``times.format_time``).
_LINE_EXTRA = len("[2026-01-01T00:00:00.000Z] ")


def _line(item: MemorySlice) -> int:
    return int(item.line)  # type: ignore[attr-defined]
