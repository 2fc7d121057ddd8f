"""Full-text postings of a core, held per process, as ``memory.vectors`` holds its vectors.

Why: BM25 needs, per query, the searched memory's size and each query token's
document count, and then every slice holding a token. Asked of the database, a
token that most slices hold costs a walk of all their postings in FTS5, and on
PostgreSQL a sequential scan that decompresses every slice's ``tsvector`` (the
planner rightly prefers it to GIN for a common word): ~100 ms at 10,000 slices.
Here a core's documents are read once (their token lines, from the full-text
index itself) into postings in numpy, refreshed incrementally, and a query walks
only its tokens' arrays.

:class:`CoreTerms` holds, for one core, every indexed slice: its full-text key
(the order's tie-break: SQLite's FTS rowid, PostgreSQL's slice id), its id, start
index, length in tokens, and for each token the slices holding it with their term
frequencies (segments of ``(token id, slice position, tf)`` sorted by token).

**Freshness.** Each search reads, for the scope's cores in one statement,
``count(*), sum(search_length), max(search_rowid)`` of their indexed slices (from
the index ``memory_slice_searched``, which covers them). ``search_rowid`` grows with
every document written (SQLite: the FTS5 row; PostgreSQL: the sequence
``memory_search_seq``, migration 0006), so an indexed slice shows as a larger
maximum and a rebuilt one too. Rows above the held maximum are read and added as a
segment; when they do not account for the new count (a slice gone, one rebuilt),
the core is read again whole. Slices leave only with their core (``delete_core``).
A slice indexed a moment ago is found by the next query.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection

from .budget import BudgetCache
from .models import MemoryCore, MemorySlice, MemoryUnit

SLICE = MemorySlice._meta.db_table
UNIT = MemoryUnit._meta.db_table
CORE = MemoryCore._meta.db_table
FTS_TABLE = "memory_search_fts"
SEQUENCE = "memory_search_seq"  # PostgreSQL: search_rowid of each document written
CACHE_MB = 256
MERGE_SEGMENTS = 8  # segments of a core beyond which they are merged into one

Signature = tuple[int, int, int]  # indexed slices, their total length, max search_rowid


@dataclass(frozen=True)
class Segment:
    tids: np.ndarray  # int32 token ids, sorted
    pos: np.ndarray  # int32 slice positions (ascending within a token)
    tf: np.ndarray  # int32 term frequencies

    @property
    def nbytes(self) -> int:
        return int(self.tids.nbytes + self.pos.nbytes + self.tf.nbytes)


def _segment(tids: list[int], pos: list[int], tfs: list[int]) -> Segment:
    t = np.asarray(tids, dtype=np.int32)
    order = np.argsort(t, kind="stable")  # positions were appended in ascending order
    return Segment(
        tids=t[order],
        pos=np.asarray(pos, dtype=np.int32)[order],
        tf=np.asarray(tfs, dtype=np.int32)[order],
    )


def _merge(segments: Sequence[Segment]) -> Segment:
    tids = np.concatenate([s.tids for s in segments])
    pos = np.concatenate([s.pos for s in segments])
    tf = np.concatenate([s.tf for s in segments])
    order = np.lexsort((pos, tids))
    return Segment(tids=tids[order], pos=pos[order], tf=tf[order])


_Row = tuple[Any, Any, str, int, int, str]  # search_rowid, key, slice id, start, length, body


class CoreTerms:
    """One core's indexed slices and their postings, as this process holds them. Use
    under ``lock``; :meth:`refresh` first."""

    def __init__(self, tenant_id: int, core_id: str) -> None:
        self.tenant_id = tenant_id
        self.core_id = core_id
        self.lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.vocab: dict[str, int] = {}
        self.keys: list[Any] = []
        self.slice_ids: list[str] = []
        self.position: dict[str, int] = {}
        self.starts: list[int] = []
        self._lengths: list[int] = []
        self.segments: list[Segment] = []
        self.max_rowid = 0
        self.length = 0
        self._lengths_array: np.ndarray | None = None
        self._key_rank: np.ndarray | None = None

    @property
    def count(self) -> int:
        return len(self.slice_ids)

    @property
    def signature(self) -> Signature:
        return self.count, self.length, self.max_rowid

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.segments) + 100 * (len(self.vocab) + self.count)

    def refresh(self, seen: Signature) -> None:
        """Catch up with the database, whose signature for this core is ``seen``."""
        if seen == self.signature:
            return
        if self.count and seen[2] > self.max_rowid and seen[0] > self.count:
            fresh = _fetch(self.tenant_id, self.core_id, after=self.max_rowid)
            ids = {row[2] for row in fresh}
            new = len(ids) == len(fresh) and not ids & self.position.keys()
            if new and self.count + len(fresh) == seen[0]:
                self._append(fresh)
                return
        self._reset()
        self._append(_fetch(self.tenant_id, self.core_id, after=None))

    def _append(self, rows: Iterable[_Row]) -> None:
        vocab = self.vocab
        tids: list[int] = []
        pos: list[int] = []
        tfs: list[int] = []
        for rowid, key, slice_id, start, length, body in rows:
            if slice_id in self.position:
                continue
            p = len(self.slice_ids)
            self.position[slice_id] = p
            self.slice_ids.append(slice_id)
            self.keys.append(key)
            self.starts.append(int(start))
            self._lengths.append(int(length))
            self.length += int(length)
            if rowid is not None:
                self.max_rowid = max(self.max_rowid, int(rowid))
            counts = Counter(body.split())
            tids += [vocab.setdefault(t, len(vocab)) for t in counts]
            pos += [p] * len(counts)
            tfs += counts.values()
        if tids:
            self.segments.append(_segment(tids, pos, tfs))
            if len(self.segments) > MERGE_SEGMENTS:
                self.segments = [_merge(self.segments)]
        self._lengths_array = None
        self._key_rank = None

    def lengths(self) -> np.ndarray:
        if self._lengths_array is None:
            self._lengths_array = np.asarray(self._lengths, dtype=np.float64)
        return self._lengths_array

    def key_rank(self) -> np.ndarray:
        """Each slice's place in the order of the full-text keys (ascending)."""
        if self._key_rank is None:
            order = sorted(range(self.count), key=self.keys.__getitem__)
            rank = np.empty(self.count, dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(self.count)
            self._key_rank = rank
        return self._key_rank

    def postings(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """(slice positions, term frequencies) of the slices holding ``token``."""
        tid = self.vocab.get(token)
        if tid is None:
            return _EMPTY, _EMPTY
        return postings_of(self.segments, tid)

    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Each token's id, -1 for a token no slice of the core holds (under ``lock``:
        the vocabulary grows in place)."""
        get = self.vocab.get
        return np.asarray([get(t, -1) for t in tokens], dtype=np.int32)


def postings_of(segments: Sequence[Segment], tid: int) -> tuple[np.ndarray, np.ndarray]:
    """(slice positions, term frequencies) of the slices holding the token ``tid``."""
    parts = []
    bounds = np.asarray([tid, tid + 1], dtype=np.int32)  # of the arrays' type: no cast of them
    for s in segments:
        lo, hi = np.searchsorted(s.tids, bounds)
        if hi > lo:
            parts.append((s.pos[lo:hi], s.tf[lo:hi]))
    if not parts:
        return _EMPTY, _EMPTY
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p for p, _ in parts]), np.concatenate([t for _, t in parts])


def counts_of(segments: Sequence[Segment], tids: np.ndarray) -> np.ndarray:
    """How many slices hold each token of ``tids`` (-1: none), a binary search per token
    and segment (a slice holds a token once in a segment, and is in one segment)."""
    out = np.zeros(len(tids), dtype=np.int64)
    for s in segments:
        out += np.searchsorted(s.tids, tids + 1) - np.searchsorted(s.tids, tids)
    return out


_EMPTY = np.zeros(0, dtype=np.int32)


def _fetch(tenant_id: int, core_id: str, *, after: int | None) -> list[_Row]:
    """The core's indexed slices (above ``after`` in ``search_rowid``, if given) with their
    token lines, read from the full-text index."""
    where = "+u.tenant_id = %s AND u.core_id = %s AND s.tenant_id = %s AND s.indexed"
    params: list[Any] = [tenant_id, core_id, tenant_id]
    if after is not None:
        where += " AND s.search_rowid > %s"
        params.append(after)
    if connection.vendor == "postgresql":
        sql = (
            "SELECT s.search_rowid, s.id, s.id, s.start_index, coalesce(s.search_length, 0), "
            f"coalesce(s.search_text, '') FROM {UNIT} u JOIN {SLICE} s ON s.unit_id = u.id "
            f"WHERE {where}"
        )
    else:  # CROSS JOIN: from the core's units (SQLite keeps the join order)
        sql = (
            "SELECT s.search_rowid, s.search_rowid, s.id, s.start_index, "
            f"coalesce(s.search_length, 0), coalesce(f.body, '') FROM {UNIT} u "
            f"CROSS JOIN {SLICE} s ON s.unit_id = u.id "
            f"LEFT JOIN {FTS_TABLE} f ON f.rowid = s.search_rowid WHERE {where}"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql + " ORDER BY s.search_rowid", params)
        return list(cursor.fetchall())


def signatures(tenant_id: int, core_ids: Sequence[str]) -> dict[str, Signature]:
    """Each core's :data:`Signature` as the database has it now, in one statement (cores
    with no indexed slice are left out)."""
    if not core_ids:
        return {}
    values: list[Any]
    if connection.vendor == "postgresql":
        cores, values = "u.core_id = ANY(%s)", [list(core_ids)]
    else:
        cores, values = f"u.core_id IN ({', '.join(['%s'] * len(core_ids))})", list(core_ids)
    # CROSS JOIN: SQLite with no statistics would otherwise walk every slice of the
    # tenant; from the cores' units (by their core index: ``+u.tenant_id`` is served by
    # no index), the index ``memory_slice_searched`` answers alone.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT u.core_id, count(*), coalesce(sum(s.search_length), 0), "
            f"coalesce(max(s.search_rowid), 0) FROM {UNIT} u CROSS JOIN {SLICE} s "
            f"WHERE s.unit_id = u.id AND +u.tenant_id = %s AND {cores} AND s.tenant_id = %s "
            "AND s.indexed "
            "GROUP BY u.core_id",
            [tenant_id, *values, tenant_id],
        )
        return {core: (int(n), int(total), int(top)) for core, n, total, top in cursor.fetchall()}


class Cache(BudgetCache[tuple[int, str], CoreTerms]):
    """``CoreTerms`` by (tenant, core), least recently used dropped past the budget
    (``FORGE_MEMORY_TERMS_CACHE_MB``)."""

    def __init__(self) -> None:
        super().__init__(setting="FORGE_MEMORY_TERMS_CACHE_MB", default_mb=CACHE_MB)

    def terms(self, tenant_id: int, core_id: str) -> CoreTerms:
        return self.get((tenant_id, core_id), lambda: CoreTerms(tenant_id, core_id))


cache = Cache()
