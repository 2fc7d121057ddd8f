"""Dense vectors of memory: stored per slice and per message, searched exactly per core.

Storage (``MemoryVectors``): one row per (slice, embedding model): the slice's
summary vector and one vector per message of its range, float16 unit rows. The
embedder's ``name`` is stored with them, and a search only ever loads the rows of
the current embedder's name, so vectors of another model are never compared
(``manage.py reindex_memory`` re-embeds them).

Search (:func:`dense_ranking`): numpy over the core's vectors, from a
per-process cache (:class:`CoreVectors`) that a query refreshes incrementally:
one ``count(*), max(id)`` on the index ``(core, model, id)``, then only the rows
added since (a deletion, seen as a count below the expected one, reloads the
core). Each slice is scored by :func:`slice_similarity`: the mean of its
summary's cosine and its best message's (the rows are unit vectors). With more than
:data:`SHORTLIST` slices in a core, a first pass over each slice's centroid
(the normalized sum of its vectors, one row per slice) keeps the
:data:`SHORTLIST` nearest, and only their vectors (and those of the full-text
candidates the caller names) are scored: a query reads about 1/30 of the
message vectors of a large core. With :data:`SHORTLIST` slices or fewer the
search is exact over every vector.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from .budget import BudgetCache
from .embeddings import Embedder, embed_texts
from .models import MemoryVectors
from .times import now_ms

logger = logging.getLogger(__name__)

STORED = np.dtype("<f2")  # float16, little-endian: half the bytes, ranking unchanged
EMBED_CHARS = 4000  # what is embedded of one text (its start)
SHORTLIST = 300  # slices of a core scored vector by vector (above: by centroid first)
CACHE_MB = 1024
VECTORS = MemoryVectors._meta.db_table

_Fetched = tuple[int, str, int, int, bytes]  # id, slice id, rows, start index, data


@dataclass(frozen=True)
class Doc:
    """What indexing knows of one slice: its summary and the texts of its messages."""

    slice_id: str
    tenant_id: int
    core_id: str
    start_index: int
    summary: str
    messages: tuple[str, ...]  # the texts of messages [start_index, start_index + len)


# --- writing --------------------------------------------------------------------------------


def matrices(docs: Sequence[Doc], embedder: Embedder) -> list[np.ndarray]:
    """Each doc's vectors, ``(1 + messages, dim)`` float16: the summary, then the messages
    (a message with no text gets a row of zeros and is not sent to the embedder).

    One ``embed_texts`` call for all the docs (the embedder's own batches). Raises
    ``EmbeddingError``.
    """
    texts: list[str] = []
    places: list[list[int | None]] = []
    for doc in docs:
        rows: list[int | None] = []
        for value in (doc.summary, *doc.messages):
            if value.strip():
                rows.append(len(texts))
                texts.append(value[:EMBED_CHARS])
            else:
                rows.append(None)
        places.append(rows)
    vectors = embed_texts(texts, embedder=embedder)
    out: list[np.ndarray] = []
    for rows in places:
        matrix = np.zeros((len(rows), embedder.dim), dtype=STORED)
        for i, at in enumerate(rows):
            if at is not None:
                matrix[i] = vectors[at]
        out.append(matrix)
    return out


def store(docs: Sequence[Doc], embedder: Embedder, *, replace: bool = False) -> int:
    """Embed and store the docs' vectors under ``embedder.name``; returns how many slices
    got vectors. Idempotent: a slice that has vectors of this model keeps them. With
    ``replace``, the slices' vectors of other models go in the same transaction.

    Raises ``EmbeddingError`` (nothing written) when the embedder fails.
    """
    if not docs:
        return 0
    return write(docs, matrices(docs, embedder), embedder, replace=replace)


def write(
    docs: Sequence[Doc], found: Sequence[np.ndarray], embedder: Embedder, *, replace: bool = False
) -> int:
    """Store vectors :func:`matrices` made (in the caller's transaction, if any): one
    ``INSERT … ON CONFLICT DO NOTHING`` (a slice that has this model's vectors keeps
    them). Returns how many slices were written."""
    if not docs:
        return 0
    at = connection.ops.adapt_datetimefield_value(now_ms())
    params: list[Any] = []
    for doc, matrix in zip(docs, found, strict=True):
        params += [
            doc.tenant_id, doc.core_id, doc.slice_id, embedder.name, embedder.dim,
            matrix.shape[0], doc.start_index, matrix.astype(STORED).tobytes(), at,
        ]  # fmt: skip
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        if replace:
            clause = ", ".join(["%s"] * len(docs))
            cursor.execute(
                f"DELETE FROM {VECTORS} WHERE slice_id IN ({clause}) AND model <> %s",
                [*(d.slice_id for d in docs), embedder.name],
            )
        cursor.execute(
            f"INSERT INTO {VECTORS} (tenant_id, core_id, slice_id, model, dim, rows, "
            "start_index, data, created_at) VALUES "
            + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(docs))
            # The unique key memoryvectors_slice_model: with the tenant on PostgreSQL
            # (memory migration 0008), without it on SQLite.
            + (
                " ON CONFLICT (slice_id, model, tenant_id) DO NOTHING"
                if connection.vendor == "postgresql"
                else " ON CONFLICT (slice_id, model) DO NOTHING"
            ),
            params,
        )
        return max(int(cursor.rowcount), 0)


# --- the per-process cache --------------------------------------------------------------------


class _Rows:
    """A growable 2-D array: appending copies only the new rows (capacity doubles)."""

    def __init__(self, dim: int, dtype: np.dtype | type) -> None:
        self.data = np.zeros((0, dim), dtype=dtype)
        self.size = 0

    def extend(self, block: np.ndarray) -> None:
        if self.size == 0 and block.dtype == self.data.dtype and block.flags.c_contiguous:
            self.data, self.size = block, block.shape[0]  # a first load: no copy (~0.5 s)
            return
        need = self.size + block.shape[0]
        if need > self.data.shape[0]:
            size = max(need, 2 * self.data.shape[0], 64)
            grown = np.zeros((size, self.data.shape[1]), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : need] = block
        self.size = need

    def view(self) -> np.ndarray:
        return self.data[: self.size]

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class CoreVectors:
    """One core's vectors of one model, as this process holds them.

    ``centroids[i]`` is slice ``slice_ids[i]``'s normalized sum of vectors;
    ``rows[offsets[i]:offsets[i + 1]]`` are its vectors (row 0 the summary, then
    messages ``start_index[i]``, ``start_index[i] + 1`` …). Use under ``lock``.
    """

    def __init__(self, core_id: str, model: str, dim: int) -> None:
        self.core_id = core_id
        self.model = model
        self.dim = dim
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.max_id = 0
        self.count = 0
        self.slice_ids: list[str] = []
        self.position: dict[str, int] = {}
        self.starts: list[int] = []
        self.offsets: list[int] = [0]
        self.centroids = _Rows(self.dim, np.float32)
        self.rows = _Rows(self.dim, np.float32)  # float16 stored; float32 here, no cast per query
        self._offsets_array: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.centroids.nbytes + self.rows.nbytes

    def refresh(self) -> None:
        """Catch up with the database: the rows added since the last refresh, or all of
        them again when any went (a deleted slice, a re-embedding)."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), max(id) FROM {VECTORS} WHERE core_id = %s AND model = %s",
                [self.core_id, self.model],
            )
            count, top = cursor.fetchone()
            top = int(top or 0)
            if (count, top) == (self.count, self.max_id):
                return
            if top > self.max_id and self.count:
                fresh = self._fetch(cursor, self.max_id, top)
                if self.count + len(fresh) == count:
                    self._append(fresh)
                    return
            self._reset()
            self._append(self._fetch(cursor, 0, top))

    def _fetch(self, cursor: CursorWrapper, after: int, upto: int) -> list[_Fetched]:
        cursor.execute(
            f"SELECT id, slice_id, rows, start_index, data FROM {VECTORS} "
            "WHERE core_id = %s AND model = %s AND id > %s AND id <= %s ORDER BY id",
            [self.core_id, self.model, after, upto],
        )
        return list(cursor.fetchall())

    def _append(self, fetched: Iterable[_Fetched]) -> None:
        blocks: list[np.ndarray] = []
        for row_id, slice_id, rows, start, data in fetched:
            self.max_id = max(self.max_id, int(row_id))
            self.count += 1
            matrix = np.frombuffer(bytes(data), dtype=STORED)
            if matrix.size != rows * self.dim or slice_id in self.position:
                continue  # not of this shape (never written so), or a duplicate
            blocks.append(matrix.reshape(rows, self.dim))
            self.position[slice_id] = len(self.slice_ids)
            self.slice_ids.append(slice_id)
            self.starts.append(int(start))
            self.offsets.append(self.offsets[-1] + rows)
        if not blocks:
            return
        stacked = np.concatenate(blocks).astype(np.float32)
        self.rows.extend(stacked)
        sums = _block_sums(stacked, blocks)
        norms = np.linalg.norm(sums, axis=1)
        norms[norms == 0] = 1.0
        self.centroids.extend((sums / norms[:, None]).astype(np.float32))
        self._offsets_array = None

    def offsets_array(self) -> np.ndarray:
        if self._offsets_array is None:
            self._offsets_array = np.asarray(self.offsets, dtype=np.int64)
        return self._offsets_array

    def scores(self, query: np.ndarray, also: Iterable[str] = ()) -> dict[str, float]:
        """Slice id → its :func:`slice_similarity` with ``query``, for the shortlist (every
        slice when the core holds at most :data:`SHORTLIST`) and the slices in ``also``."""
        total = len(self.slice_ids)
        if not total:
            return {}
        if total > SHORTLIST:
            near = np.argpartition(-_dot(self.centroids.view(), query), SHORTLIST)[:SHORTLIST]
            extra = [self.position[s] for s in also if s in self.position]
            picked = np.unique(np.concatenate([near, np.asarray(extra, dtype=np.int64)]))
        else:
            picked = np.arange(total)
        offsets = self.offsets_array()
        starts = offsets[picked]
        lengths = offsets[picked + 1] - starts
        firsts = np.cumsum(lengths) - lengths
        where = np.arange(int(lengths.sum())) - np.repeat(firsts - starts, lengths)
        sims = _dot(self.rows.data[where], query)
        return {
            self.slice_ids[i]: float(s)
            for i, s in zip(picked.tolist(), slice_similarity(sims, firsts), strict=True)
        }

    def message_scores(self, slice_id: str, query: np.ndarray) -> dict[int, float]:
        """Message index → cosine with ``query``, for the slice's messages with vectors."""
        i = self.position.get(slice_id)
        if i is None:
            return {}
        block = self.rows.data[self.offsets[i] + 1 : self.offsets[i + 1]]
        sims = _dot(block, query).tolist()
        start = self.starts[i]
        present = np.flatnonzero(block.any(axis=1)).tolist()  # no text: a row of zeros
        return {start + j: sims[j] for j in present}


def slice_similarity(sims: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Each slice's score from its rows' cosines with the query: the mean of its summary's
    (row 0) and its best message's, ``(cos(summary) + max cos(message)) / 2``.

    ``sims`` holds the slices' rows one slice after another, ``firsts`` where each slice's
    summary row is (increasing; every slice has its summary row). A slice with no
    message rows scores its summary's cosine alone.

    Why both: the offline model is an average of token vectors, so one short message's
    cosine is noisy (a greeting near the query's function words can win), while the
    summary says what the whole slice is about; a slice scores high when its topic
    *and* one of its messages are near the query. On ``bench/memory_recall.py``
    the dense ranking alone finds the evidence slice in its first 5 for 0.60-0.65 of
    the English questions with this score and 0.43-0.49 with the best vector alone
    (seeds 7, 11, 23; ``docs/memory.md``, "Search").
    """
    summaries = sims[firsts]
    messages = sims.copy()
    messages[firsts] = -np.inf
    best = np.maximum.reduceat(messages, firsts)
    best = np.where(np.isfinite(best), best, summaries)
    return (summaries + best) / 2


def _dot(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` on this thread: numpy's own loop, not a BLAS call, whose
    worker threads make a small product wait on a busy machine."""
    return np.einsum("ij,j->i", matrix, vector)


def _block_sums(stacked: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    """Each block's sum of rows, ``np.add.reduceat(stacked, starts, axis=0)`` to the bit
    (rows added in the same order), in ~1/4 of its time: the k-th rows of all blocks
    at once (reduceat took 1.2 s of a 10,000-slice core's first load)."""
    lengths = np.asarray([b.shape[0] for b in blocks], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    sums = stacked[starts]  # a copy: every block has at least one row
    for k in range(1, int(lengths.max())):
        longer = np.flatnonzero(lengths > k)
        sums[longer] += stacked[starts[longer] + k]
    return sums


class Cache(BudgetCache[tuple[str, str], CoreVectors]):
    """``CoreVectors`` by (core, model), least recently used dropped past the budget
    (``FORGE_MEMORY_VECTOR_CACHE_MB``)."""

    def __init__(self) -> None:
        super().__init__(setting="FORGE_MEMORY_VECTOR_CACHE_MB", default_mb=CACHE_MB)

    def vectors(self, core_id: str, model: str, dim: int) -> CoreVectors:
        return self.get(
            (core_id, model),
            lambda: CoreVectors(core_id, model, dim),
            usable=lambda entry: entry.dim == dim,
        )


cache = Cache()


def core_vectors(core_id: str, embedder: Embedder) -> CoreVectors:
    """The core's vectors of the embedder's model, refreshed. Use under its ``lock``."""
    return cache.vectors(core_id, embedder.name, embedder.dim)


def dense_ranking(
    core_ids: Sequence[str],
    query: np.ndarray,
    embedder: Embedder,
    *,
    also: Iterable[str] = (),
    minimum: float = 0.0,
) -> list[tuple[str, float]]:
    """(slice id, :func:`slice_similarity`) of the slices of ``core_ids`` nearest to
    ``query``, best first, those above ``minimum`` only: the shortlist of each core, and
    the slices of ``also`` (the full-text candidates)."""
    wanted = set(also)
    found: dict[str, float] = {}
    for core_id in core_ids:
        entry = core_vectors(core_id, embedder)
        with entry.lock:
            entry.refresh()
            found.update(entry.scores(query, wanted))
    cache.trim()
    newest_first = sorted(((s, v) for s, v in found.items() if v > minimum), reverse=True)
    return sorted(newest_first, key=lambda item: -item[1])


def message_scores(
    core_id: str, slice_id: str, query: np.ndarray, embedder: Embedder
) -> dict[int, float]:
    """Message index → cosine with ``query`` of one slice's messages (from the cache)."""
    entry = core_vectors(core_id, embedder)
    with entry.lock:
        return entry.message_scores(slice_id, query)
