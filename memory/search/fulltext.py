"""The full-text ranking (:func:`lexical`, step 1): BM25 over the searched memory alone,
from the postings this process holds (:func:`held_lexical`) or from the database
(SQLite FTS5, PostgreSQL tsvector)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection

from .. import postings
from .fusion import Candidate, Lexical
from .query import TERMS_MAX, TERMS_POOL, _single, informative, salient, weight
from .scope import SCOPE_CORES_MAX, Scope, _candidates, _fts_scope, _slice_scope, with_units
from .tables import FTS_TABLE, SLICE, _in

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.


RERANK = 100  # full-text candidates scored by the full BM25
K1 = 1.2
B = 0.75
TERMS_CORES_MAX = 32  # scopes of up to this many cores rank from the held postings


def _matching(scope: Scope, words: Sequence[str]) -> tuple[str, list[list[Any]]]:
    """SQL selecting the full-text keys of the scope's slices holding each word, in
    ``{key}`` form (``key``), with each word's parameters."""
    where, params = _slice_scope(scope)
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT s.id AS key FROM {SLICE} s WHERE s.search_document @@ %s::tsquery AND {where}"
        )
        return sql, [[f"'{w}'", *params] for w in words]
    sql = f"SELECT rowid AS key FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s"
    extra: list[Any] = []
    if not scope.whole_tenant and len(scope.core_ids) > SCOPE_CORES_MAX:
        # The tenant's postings, narrowed to the scope's cores by their slices. The unary
        # ``+`` keeps the IN from FTS5's planner: offered ``rowid IN (…)``, FTS5 looked
        # each of the scope's rowids up in the index (a user of 340 cores, one of 10,000
        # slices: 4-9 s a search, 78 s at 1,500 cores); as a filter on the MATCH's rows,
        # the subquery is read once (0.06 s).
        sql += f" AND +rowid IN (SELECT s.search_rowid FROM {SLICE} s WHERE {where})"
        extra = params
    fts_scope = _fts_scope(scope)
    return sql, [[f'body : "{w}" AND {fts_scope}', *extra] for w in words]


def holding_all(words: Sequence[str]) -> tuple[str, list[Any]]:
    """SQL selecting the ids of the slices whose indexed text (the summary and the raw
    messages of the range, folded as search folds: case, accents, CJK by pairs) holds
    every one of ``words``, with its parameters; not scoped (the caller's queryset is,
    and row-level security on PostgreSQL): the admin's search (``memory.admin``)."""
    if connection.vendor == "postgresql":
        sql = f"SELECT s.id FROM {SLICE} s WHERE s.search_document @@ %s::tsquery"
        return sql, [" & ".join(f"'{w}'" for w in words)]
    sql = (
        f"SELECT s.id FROM {SLICE} s WHERE s.search_rowid IN "
        f"(SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s)"
    )
    return sql, [" AND ".join(f'body : "{w}"' for w in words)]


COUNT_CAP = 256  # SQLite: a token's slices counted, at most, to choose a long query's pool


def _pool(cursor: Any, scope: Scope, words: Sequence[str]) -> list[str]:
    """The :data:`TERMS_POOL` of ``words`` (over that many) the scope holds in fewest
    slices, in the query's order: those whose exact counts the ranking then reads.

    One statement counts every token's slices in the scope (tenant-filtered, as every
    read). PostgreSQL: the scope's slices holding any token (one GIN scan of their OR),
    their lexemes among the tokens grouped (``GROUP BY``), exact counts. SQLite: the
    tokens as one ``json_each`` array, each matched by a correlated FTS5 subquery (the
    statement's text does not grow with the query), each count stopped at
    :data:`COUNT_CAP` (a token no slice holds costs one index lookup; a common one, at
    most the cap's rows). Tokens the scope does not hold take no place; ties (on SQLite
    at the cap too: all held by at least that many slices) go to words and pairs before
    single CJK characters, then the earlier in the query, as :func:`informative`."""
    where, params = _slice_scope(scope)
    place = {w: i for i, w in enumerate(words)}
    if connection.vendor == "postgresql":
        # One bitmap scan of the GIN index for any of the tokens (a tsquery of constants,
        # so the planner sees them), each matching slice's lexemes grouped: exact counts.
        cursor.execute(
            f"SELECT l, count(*) FROM {SLICE} s "
            "CROSS JOIN LATERAL unnest(tsvector_to_array(s.search_document)) l "
            f"WHERE s.search_document @@ %s::tsquery AND {where} AND l = ANY(%s) GROUP BY l",
            [" | ".join(f"'{w}'" for w in words), *params, list(words)],
        )
        counted = {place[w]: int(n) for w, n in cursor.fetchall() if w in place}
    else:
        sql = (
            f"SELECT 1 FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH "
            "('body : \"' || t.value || '\" AND ' || %s)"
        )
        extra: list[Any] = []
        if not scope.whole_tenant and len(scope.core_ids) > SCOPE_CORES_MAX:
            sql += f" AND +rowid IN (SELECT s.search_rowid FROM {SLICE} s WHERE {where})"
            extra = params  # as :func:`_matching`
        cursor.execute(
            f"SELECT t.key, (SELECT count(*) FROM ({sql} LIMIT %s)) FROM json_each(%s) t",
            [_fts_scope(scope), *extra, COUNT_CAP, json.dumps(list(words))],
        )
        counted = {int(i): int(n) for i, n in cursor.fetchall()}
    holding = [counted.get(i, 0) for i in range(len(words))]
    held = [w for w in words if holding[place[w]]]
    held.sort(key=lambda w: (holding[place[w]], _single(w), place[w]))
    kept = set(held[:TERMS_POOL])
    return [w for w in words if w in kept]


def lexical(
    scope: Scope,
    words: Sequence[str],
    *,
    window: int,
    boosts: dict[str, float] | None = None,
) -> Lexical:
    """The full-text ranking of the scope's slices for ``words`` (the query's distinct
    tokens, uncut, and its expansion terms, ``boosts``' keys): its best ``window`` (the
    package docstring, step 1).

    Of the query's tokens, the :data:`TERMS_MAX` the scope holds in fewest slices are
    searched (:func:`informative`), from the counts the ranking reads anyway: every
    token's, from the held postings (a binary search per token); from the database,
    those of at most :data:`TERMS_POOL` tokens, so that choosing costs at most one more
    count of the cap's size. A query of more tokens than that is first cut to the
    :data:`TERMS_POOL` the scope holds in fewest slices (:func:`_pool`: one statement
    over every token, each count stopped at :data:`COUNT_CAP`); before (QA), to its first
    ones, so "w0 ... w199 coffee" found nothing on this path and "coffee" on the other.

    The scope's size and each word's count, and the ``window`` slices with the largest
    sum of idf (ties: the newest): two statements on SQLite (FTS5 walks postings
    fast), one on PostgreSQL (each word's matches read once); then their token lines,
    for BM25.
    """
    out = Lexical()
    if not words:
        return out
    boosts = boosts or {}
    if len(scope.core_ids) <= TERMS_CORES_MAX:
        return held_lexical(scope, words, window=window, boosts=boosts)
    scope = with_units(scope)
    asked = [w for w in words if w not in boosts]
    with connection.cursor() as cursor:
        if len(asked) > TERMS_POOL:
            asked = _pool(cursor, scope, asked)
        pool = [*asked, *(w for w in words if w in boosts)]
        if not pool:
            return out
        if connection.vendor == "postgresql":
            stats = _head_postgres(cursor, scope, pool, window, boosts)
        else:
            stats = _head_sqlite(cursor, scope, pool, window, boosts)
        if stats is None:
            return out
        total, length, held, head = stats
        average = max(float(length) / total, 1.0)
        out.idf = {w: weight(total, n) * boosts.get(w, 1.0) for w, n in held.items()}
        weighed = out.idf
        out.idf = salient(out.idf, boosts)  # the window was chosen by every word's weight
        out.dropped = set(weighed) - set(out.idf)
        key_column = "s.id" if connection.vendor == "postgresql" else "s.search_rowid"
        clause, values = _in(key_column, head)
        by_key = dict(_candidates(cursor, clause, values)) if head else {}
    # The window by the full BM25, from their token lines; ties as the first order.
    place = {key: i for i, key in enumerate(head)}
    scored = [(key, _bm25(by_key[key], out.idf, average)) for key in head if key in by_key]
    scored = [item for item in scored if item[1] > 0]  # a match of dropped terms alone
    scored.sort(key=lambda item: (-item[1], place[item[0]]))
    out.order = [by_key[key].slice_id for key, _ in scored]
    out.found = {by_key[key].slice_id: by_key[key] for key, _ in scored}
    return out


def held_lexical(
    scope: Scope,
    words: Sequence[str],
    *,
    window: int,
    boosts: dict[str, float] | None = None,
) -> Lexical:
    """:func:`lexical` from the postings this process holds (``memory.postings``): the
    same ranking (N, each word's n and the average length of the scope's indexed
    slices; the ``window`` of the largest sum of idf, ties to the larger full-text key;
    then the full BM25), with no walk of postings in the database. Its ``found`` is
    empty: the hits' token lines are read by the caller (:func:`candidates`).

    Every word's count is read (a binary search per word and segment, whatever the
    query's length), and the postings of the :func:`informative` ones only."""
    out = Lexical()
    seen = postings.signatures(scope.tenant_id, scope.core_ids)
    held: list[_Held] = []
    tids: list[np.ndarray] = []
    for core_id in scope.core_ids:
        if core_id not in seen:
            continue
        entry = postings.cache.terms(scope.tenant_id, core_id)
        with entry.lock:  # a snapshot: the arrays are never changed in place
            entry.refresh(seen[core_id])
            if entry.count:
                held.append(
                    _Held(
                        count=entry.count,
                        length=entry.length,
                        lengths=entry.lengths(),
                        key_rank=entry.key_rank(),
                        keys=entry.keys,
                        slice_ids=entry.slice_ids,
                        segments=tuple(entry.segments),
                        postings={},
                    )
                )
                tids.append(entry.token_ids(words))
    postings.cache.trim()
    total = sum(h.count for h in held)
    counts = np.zeros(len(words), dtype=np.int64)
    for h, t in zip(held, tids, strict=True):
        counts += postings.counts_of(h.segments, t)
    boosts = boosts or {}
    place = {w: i for i, w in enumerate(words)}
    words = informative(words, counts.tolist(), boosts.keys())
    if not total or not words:
        return out
    for h, t in zip(held, tids, strict=True):
        for w in words:
            tid = int(t[place[w]])
            h.postings[w] = postings.postings_of(h.segments, tid) if tid >= 0 else _NONE
    holding = [int(counts[place[w]]) for w in words]
    total = max(total, *holding)
    average = max(float(sum(h.length for h in held)) / total, 1.0)
    out.idf = {
        w: weight(total, n) * boosts.get(w, 1.0) for w, n in zip(words, holding, strict=True) if n
    }
    # The window by the sum of idf of the words a slice holds, ties: the larger key.
    head: list[tuple[float, Any, int, int]] = []  # score, key, which core, position
    for c, h in enumerate(held):
        score = np.zeros(h.count)
        for w, value in out.idf.items():
            score[h.postings[w][0]] += value
        hit = np.flatnonzero(score)
        top = hit[np.lexsort((-h.key_rank[hit], -score[hit]))[:window]]
        head += [(float(score[p]), h.keys[p], c, p) for p in top.tolist()]
    if len(held) > 1:
        head.sort(key=lambda item: item[1], reverse=True)
        head.sort(key=lambda item: -item[0])
        del head[window:]
    # The window by the full BM25 (as :func:`_bm25`, term frequencies from the postings).
    weighed = out.idf
    out.idf = salient(out.idf, boosts)
    out.dropped = set(weighed) - set(out.idf)
    bm25 = [0.0] * len(head)
    for c, h in enumerate(held):
        mine = [i for i, item in enumerate(head) if item[2] == c]
        if not mine:
            continue
        where = np.asarray([head[i][3] for i in mine], dtype=np.int32)  # as the postings
        norm = K1 * (1 - B + B * h.lengths[where] / average)
        score = np.zeros(len(where))
        for w, value in out.idf.items():
            pos, tf = h.postings[w]
            if not len(pos):
                continue
            at = np.minimum(np.searchsorted(pos, where), len(pos) - 1)
            freq = np.where(pos[at] == where, tf[at], 0)
            score += value * freq * (K1 + 1) / (freq + norm)
        for i, value in zip(mine, score.tolist(), strict=True):
            bm25[i] = value
    ranked = sorted((i for i in range(len(head)) if bm25[i] > 0), key=lambda i: (-bm25[i], i))
    out.order = [held[head[i][2]].slice_ids[head[i][3]] for i in ranked]
    return out


@dataclass(frozen=True)
class _Held:
    """What one search reads of a core's held postings (see :func:`held_lexical`)."""

    count: int
    length: int
    lengths: np.ndarray
    key_rank: np.ndarray
    keys: list[Any]
    slice_ids: list[str]
    segments: tuple[postings.Segment, ...]
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # of the searched words, filled after


_NONE = (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32))


Head = tuple[int, float, dict[str, int], list[Any]]  # N, total length, kept words' n, the window


def _head_sqlite(
    cursor: Any, scope: Scope, words: Sequence[str], window: int, boosts: dict[str, float]
) -> Head | None:
    where, params = _slice_scope(scope)
    matching, word_params = _matching(scope, words)
    cursor.execute(
        "SELECT n.total, n.length"
        + "".join(f", (SELECT count(*) FROM ({matching}) m{i})" for i in range(len(words)))
        + " FROM (SELECT count(*) AS total, coalesce(sum(s.search_length), 0) AS length "
        f"FROM {SLICE} s WHERE s.indexed AND {where}) n",
        [*(v for values in word_params for v in values), *params],
    )
    total, length, *holding = cursor.fetchone()
    searched = set(informative(words, [int(n) for n in holding], boosts.keys()))
    held = {w: int(n) for w, n in zip(words, holding, strict=True) if w in searched}
    if not total or not held:
        return None
    total = max(int(total), *held.values())
    kept = [
        (weight(total, held[w]) * boosts.get(w, 1.0), values)
        for w, values in zip(words, word_params, strict=True)
        if w in held
    ]
    cursor.execute(
        "SELECT key, sum(w) AS score FROM ("
        + " UNION ALL ".join(
            f"SELECT key, %s AS w FROM ({matching}) m{i}" for i in range(len(kept))
        )
        + ") hits GROUP BY key ORDER BY score DESC, key DESC LIMIT %s",
        [v for w, values in kept for v in (w, *values)] + [window],
    )
    return total, float(length), held, [row[0] for row in cursor.fetchall()]


def _head_postgres(
    cursor: Any, scope: Scope, words: Sequence[str], window: int, boosts: dict[str, float]
) -> Head | None:
    """One statement: each word's matches read once (materialized), counted, the
    :func:`informative` ones kept (``k``: the fewest slices first, ties by ``rank``, as
    there), weighted (the idf of :func:`weight`, in SQL, times the word's boost) and
    summed per slice."""
    where, params = _slice_scope(scope)
    matching, word_params = _matching(scope, words)
    cursor.execute(
        "WITH size AS MATERIALIZED (SELECT count(*)::float8 AS total, "
        "coalesce(sum(s.search_length), 0)::float8 AS length "
        f"FROM {SLICE} s WHERE s.indexed AND {where}), "
        "m AS MATERIALIZED ("
        + " UNION ALL ".join(
            f"SELECT {i} AS t, key FROM ({matching}) m{i}" for i in range(len(words))
        )
        + "), df AS (SELECT t, count(*)::float8 AS n FROM m GROUP BY t), "
        "r AS (SELECT %s::int[] AS rank), "
        "k AS (SELECT df.t FROM df, r WHERE r.rank[df.t + 1] >= 0 "
        "ORDER BY df.n, r.rank[df.t + 1] LIMIT %s), "
        "w AS (SELECT df.t, df.n, ln(1 + (greatest(size.total, df.n) - df.n + 0.5) "
        "/ (df.n + 0.5)) * (%s::float8[])[df.t + 1] AS w FROM df, size, r "
        "WHERE r.rank[df.t + 1] < 0 OR df.t IN (SELECT t FROM k)), "
        "top AS (SELECT m.key, sum(w.w) AS score FROM m JOIN w USING (t) GROUP BY m.key "
        "ORDER BY score DESC, m.key DESC LIMIT %s) "
        "SELECT 'k', key, score FROM top "
        "UNION ALL SELECT 'n', t::text, n FROM w "
        "UNION ALL SELECT 'size', total::text, length FROM size",
        [
            *params,
            *(v for values in word_params for v in values),
            [-1 if w in boosts else i + len(words) * _single(w) for i, w in enumerate(words)],
            TERMS_MAX,
            [boosts.get(w, 1.0) for w in words],
            window,
        ],
    )
    held: dict[str, int] = {}
    head: list[tuple[str, float]] = []
    total, length = 0, 0.0
    for kind, key, number in cursor.fetchall():
        if kind == "k":
            head.append((key, float(number)))
        elif kind == "n":
            held[words[int(key)]] = int(number)
        else:
            total, length = int(float(key)), float(number)
    if not total or not held:
        return None
    head.sort(key=lambda item: item[0], reverse=True)  # the newest first, among equals
    head.sort(key=lambda item: -item[1])
    held = {w: held[w] for w in words if w in held}  # in the query's order
    return max(total, *held.values()), length, held, [key for key, _ in head]


def _spaced(text: str) -> str:
    """Token lines with two spaces around every token, so ``str.count(" t ")`` counts
    each whole token ``t``, repeated ones included (C speed, no list of tokens)."""
    return " " + text.replace(" ", "  ").replace("\n", "  ") + " "


def _bm25(candidate: Candidate, idf: dict[str, float], average: float) -> float:
    spaced = _spaced(candidate.body)
    norm = K1 * (1 - B + B * candidate.length / average)
    score = 0.0
    for t, w in idf.items():
        tf = spaced.count(f" {t} ")
        if tf:
            score += w * tf * (K1 + 1) / (tf + norm)
    return score
