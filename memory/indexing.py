"""The AfterRolling search-index consumer, and batching it over a sweep.

:func:`consumer` is the built-in AfterRolling consumer (``memory.apps``
registers it): it indexes the new slice (full text and vectors, through
:func:`memory.search.index_docs`) once the rolling has committed.

Outside a sweep it indexes at once, so a slice that ``roll_core`` (the API's
"roll now", a test) just wrote is searchable when the call returns.

Inside :func:`batched` (``memory.rolling.sweep`` opens it), the slices wait in
a per-thread batch and are indexed together: one embedder call and one
transaction per batch instead of per slice (the embedder call and the commit
were most of a rolling's cost in ``bench/rolling.py``). Invariants:

* a batch is indexed when it holds :data:`BATCH_SLICES` slices, when its oldest
  slice has waited :data:`BATCH_SECONDS` by the time another one arrives, and
  when the outermost :func:`batched` exits (normally or not), so a slice waits
  at most one more rolling plus :data:`BATCH_SECONDS`, and never past the sweep;
* indexing happens after the rollings' commits, outside any transaction of
  theirs (the consumer runs from ``on_commit``), so a failure never touches a
  rolling;
* a batch that fails is retried one slice at a time, and a slice that still
  fails is logged and left unindexed: the next sweep's catch-up
  (:func:`memory.search.index_pending`) indexes it, vectors included. A failing
  embedder is not a failure here: ``index_docs`` writes the full text alone,
  with a warning.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from . import search
from .batching import SweepBatch
from .results import RollingResult
from .vectors import Doc

logger = logging.getLogger(__name__)

__all__ = ["BATCH_SECONDS", "BATCH_SLICES", "batched", "consumer", "flush"]

BATCH_SLICES = 64
BATCH_SECONDS = 0.5


_batch: SweepBatch[str, Doc] = SweepBatch()  # slice id -> its document


def batched() -> AbstractContextManager[None]:
    """Within, :func:`consumer` collects slices and indexes them in batches; the
    outermost exit indexes what is left. Nests; per thread (:mod:`memory.batching`)."""
    return _batch.batched(flush)


def consumer(result: RollingResult) -> None:
    """The built-in AfterRolling consumer: index the new slice (now, or in the batch)."""
    doc = search.doc_of(result)
    if not _batch.open:
        search.index_docs([doc])
        return
    if _batch.add(doc.slice_id, doc, size=BATCH_SLICES, seconds=BATCH_SECONDS):
        flush()


def flush() -> int:
    """Index the slices waiting in this thread's batch; returns how many entered the
    full-text index. Never raises for one slice's failure (module docstring)."""
    docs = list(_batch.take().values())
    if not docs:
        return 0
    try:
        return search.index_docs(docs)
    except Exception:
        logger.exception(
            "memory indexing: a batch of %d slices failed, retrying one by one", len(docs)
        )
    done = 0
    for doc in docs:
        try:
            done += search.index_docs([doc])
        except Exception:
            logger.exception(
                "memory indexing: slice %s left unindexed (the next sweep indexes it)",
                doc.slice_id,
            )
    return done
