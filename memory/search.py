"""Hybrid search of what was said: full text and dense vectors, fused by rank.

**Documents.** A slice is indexed as one document: its summary and the raw
messages of its range (``MemoryMessage`` rows ``[start_index, end_index)`` of
its unit), cut into tokens by ``memory.text`` (folded, stemmed English words,
CJK bigrams and unigrams), a line per text (the summary first, then each
message). The same tokens go to both engines:

* SQLite: the FTS5 table ``memory_search_fts(body, scope)``; ``body`` holds the
  token lines, ``scope`` the tenant and core (``t<tenant> c<core>``) so a query
  walks only the searched memory's postings. ``MemorySlice.search_rowid`` is the
  document's row; a trigger drops it when the slice is deleted.
* PostgreSQL: ``memory_memoryslice.search_document`` (a ``tsvector`` of the
  distinct tokens, GIN index) and ``search_text`` (the token lines).

Dense vectors (``memory.vectors``) are stored per slice and per message.

**Ranking** (:func:`search`), from the searched memory alone (issue 17: the
index is shared by every tenant, and an engine's own statistics, such as FTS5's
bm25, would let another tenant's rows move the order):

0. *Expansion* (:func:`expansion`): the query's English words that are whole words
   of the offline model bring their nearest words (``memory.embeddings.neighbours``)
   as extra terms, each weighing ``FORGE_MEMORY_EXPANSION_WEIGHT`` x cosine of its idf.
1. *Full text*: BM25 (``k1`` 1.2, ``b`` 0.75) over the searched slices, with
   ``N`` (slices searched), each token's ``n`` (how many of them hold it) and
   the average length counted in the searched memory;
   ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))``. Every slice holding a query
   token is ranked by the sum of the idf of the tokens it holds, and the best
   :data:`RERANK` of them (at least ``limit``) by the full BM25 score of the
   :func:`salient` terms (Latin terms of little weight dropped). For a
   scope of up to :data:`TERMS_CORES_MAX` cores, from the postings this process
   holds per core (``memory.postings``, :func:`held_lexical`); for a wider one,
   by asking the database (term frequencies read from the window's token lines).
2. *Best message* (:func:`best_message_matches`): the first :data:`PASSAGES` of that
   order (at least ``limit``) by their best
   single message, scored by the sum of the idf of the distinct query tokens it
   holds, plus :data:`NEIGHBOUR_SHARE` of those only its neighbours hold (the answer
   is usually one message, or two turns; a slice's BM25 sums all of them).
3. *Dense*: the query's vector against the searched cores' vectors; a slice
   scores the mean of its summary's cosine and its best message's
   (``vectors.slice_similarity``), above ``FORGE_MEMORY_DENSE_MIN_SIMILARITY``.
4. *Reciprocal-rank fusion*: ``score(s) = Σ w_i / (RRF_K + rank_i(s))`` over the
   three rankings a slice is in (``RRF_K`` = 60, ranks from 1; ``w`` 1 for full
   text, ``FORGE_MEMORY_PASSAGE_WEIGHT`` and ``FORGE_MEMORY_DENSE_WEIGHT``). Ties:
   the better full-text rank, then best-message, then dense, then the newest.
   Hits carry ``rank`` (1, 2, 3 …), never a score.

Inside each hit, its messages are ranked the same way (the query tokens' idf
times ``tf / (tf + k1)`` per message line, and the message's cosine), and the best
:data:`MESSAGES_PER_HIT` are returned.

**Fallbacks.** Vectors off (``FORGE_MEMORY_VECTORS``), no embedder, or an
embedder that fails (``EmbeddingError``): full-text results, with a logged
warning; never an error. A query with no tokens (only stop words, emoji,
punctuation) gives ``[]`` without asking the embedder.

**Indexing.** The AfterRolling consumer (``memory.indexing``) indexes the new
slice (full text, then vectors, one embedder call for its summary and
messages), after the rolling's commit, at once or, during a sweep, in batches
of slices; ``update_memory_unit`` and
``restore_unit`` index on commit. A failing embedder leaves the slice with full
text only (a warning; ``reindex_memory`` embeds it later). ``roll_dialogs``
indexes any slice a dead process left out (:func:`index_pending`).

A query is never handed to the database as a query language: its tokens are
letters and digits only, each searched as one plain term, any of them matching.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from . import postings, text, vectors
from .embeddings import Embedder, EmbeddingError, embed_texts, get_embedder, neighbours
from .exceptions import InvalidQuery
from .models import MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .results import RollingResult
from .vectors import Doc

logger = logging.getLogger(__name__)

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.

FTS_TABLE = "memory_search_fts"
SLICE = MemorySlice._meta.db_table
UNIT = MemoryUnit._meta.db_table
CORE = MemoryCore._meta.db_table
MESSAGE = MemoryMessage._meta.db_table
QUERY_MAX = 1000
TERMS_MAX = 32
LIMIT_MAX = 100
INDEX_BATCH = 500
DISTINCT_MAX = 50_000  # distinct tokens of one PostgreSQL document (a tsvector is < 1 MB)
RERANK = 100  # full-text candidates scored by the full BM25
PASSAGES = 20  # the best of those whose messages are scored one by one (best message)
NEIGHBOUR_SHARE = 0.5  # of the idf of query tokens held by a message's neighbours only
RRF_K = 60
K1 = 1.2
B = 0.75
MESSAGES_PER_HIT = 3
SCOPE_CORES_MAX = 64  # cores named one by one in an FTS5 query; more: the tenant's postings
DENSE_CORES_MAX = 32  # cores whose vectors one search reads (the most recently active)
TERMS_CORES_MAX = 32  # scopes of up to this many cores rank from the held postings


def terms(query: Any) -> list[str]:
    """The distinct tokens of ``query`` (at most ``TERMS_MAX``), in order.

    Raises ``InvalidQuery`` for a non-string or a query over ``QUERY_MAX`` characters.
    """
    if not isinstance(query, str):
        raise InvalidQuery("a query must be a string")
    if len(query) > QUERY_MAX:
        raise InvalidQuery(f"a query is at most {QUERY_MAX} characters")
    return list(dict.fromkeys(text.query_tokens(query)))[:TERMS_MAX]


EXPANSION_MAX = 16  # expansion terms added to one query
EXPANSION_PER_WORD = 3  # of each query word's nearest words


def expansion(query: str, words: Sequence[str]) -> dict[str, float]:
    """Extra terms for ``query`` (whose tokens are ``words``): the nearest words of each
    of its English words in the offline model (``memory.embeddings.neighbours``), as
    tokens, each with its boost, ``FORGE_MEMORY_EXPANSION_WEIGHT`` times the cosine
    (the largest, for a token near several words): a matched expansion term counts that
    share of its idf. Tokens of the query itself, stop words and CJK are never added;
    at most :data:`EXPANSION_MAX`, in the query's order."""
    share = expansion_weight()
    if share <= 0:
        return {}
    have = set(words)
    out: dict[str, float] = {}
    for word, _token in text.query_words(query):
        taken = 0
        for near, cosine in neighbours.of(word):
            token = text.word_token(near)
            if token is None or token in have:
                continue  # a stop word, or a form of a query word ("yards" for "yard")
            taken += 1
            if taken > EXPANSION_PER_WORD:
                break
            boost = share * cosine
            if boost > out.get(token, 0.0):
                if token not in out and len(out) >= EXPANSION_MAX:
                    continue
                out[token] = boost
    return out


LOW_IDF_SHARE = 0.25  # a Latin term weighing less than this share of the query's most is dropped


def salient(idf: dict[str, float], boosts: dict[str, float] | None = None) -> dict[str, float]:
    """The query's terms that rank: ``idf`` without the Latin-script terms whose own idf
    (an expansion term's before its boost) is under :data:`LOW_IDF_SHARE` of the
    largest (a word most of the searched slices hold,
    "new", "recently", "favorite", says nothing of which one holds the answer, yet in
    a slice's BM25 and a message's sum it adds up, and picks the slice that says
    everyday words most often). CJK tokens are kept: their unigrams weigh little one by
    one and are there to match together (a paraphrase sharing characters).

    Applied after the window (the :data:`RERANK` slices by every term's weight) is
    chosen, to the BM25 that orders it, the best-message ranking and the hits' messages.
    """
    if not idf:
        return idf
    boosts = boosts or {}
    own = {t: w / boosts.get(t, 1.0) for t, w in idf.items()}  # an expansion term: its idf
    floor = LOW_IDF_SHARE * max(own.values())
    return {t: w for t, w in idf.items() if own[t] >= floor or text.has_cjk(t)}


def weight(total: int, holding: int) -> float:
    """How much matching a token counts: BM25's inverse document frequency, over the
    searched memory alone (``total`` slices, ``holding`` of which hold the token)."""
    return math.log(1 + (total - holding + 0.5) / (holding + 0.5))


def vectors_enabled() -> bool:
    return bool(getattr(settings, "FORGE_MEMORY_VECTORS", True))


def dense_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_DENSE_WEIGHT", 0.3))


def passage_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_PASSAGE_WEIGHT", 0.4))


def expansion_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_EXPANSION_WEIGHT", 0.5))


def dense_minimum() -> float:
    return float(getattr(settings, "FORGE_MEMORY_DENSE_MIN_SIMILARITY", 0.0))


def embedder_or_none(purpose: str) -> Embedder | None:
    """The process's embedder, or None (vectors off, or it cannot be built: logged)."""
    if not vectors_enabled():
        return None
    try:
        return get_embedder()
    except Exception as exc:  # misconfigured, not installed, a factory that raised
        message = f"{type(exc).__name__}: {exc}"
        if message not in _unbuilt:  # once per process and cause: it fails every time
            _unbuilt.add(message)
            logger.warning("memory %s: no embedder (%s); full text only", purpose, message)
        return None


_unbuilt: set[str] = set()


def forget_failures() -> None:
    """Warn again about an embedder that cannot be built (its settings changed)."""
    _unbuilt.clear()


def _in(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """``column IN (…)`` for either engine, with its parameters."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s)", [list(values)]
    return f"{column} IN ({', '.join(['%s'] * len(values))})", list(values)


# --- documents -------------------------------------------------------------------------------


def core_token(core_id: str) -> str:
    return "c" + re.sub(r"[^0-9a-z]", "", core_id.lower())


def tenant_token(tenant_id: int) -> str:
    return f"t{int(tenant_id)}"


@dataclass(frozen=True)
class Document:
    """A slice's full-text document: token lines (summary, then each message)."""

    body: str
    length: int
    lexemes: list[str]


def document(doc: Doc) -> Document:
    lines = [text.tokens(doc.summary), *(text.tokens(m) for m in doc.messages)]
    seen: dict[str, None] = {}
    for line in lines:
        seen.update(dict.fromkeys(line))
    return Document(
        body="\n".join(" ".join(line) for line in lines),
        length=sum(len(line) for line in lines),
        lexemes=list(seen)[:DISTINCT_MAX],
    )


def doc_of(result: RollingResult) -> Doc:
    return Doc(
        slice_id=result.slice_id,
        tenant_id=result.tenant_id,
        core_id=result.core_id,
        start_index=int(result.slice["start_index"]),
        summary=str(result.slice["summary"]),
        messages=tuple(str(m.get("text", "")) for m in result.messages),
    )


def load_docs(
    slice_ids: Sequence[str] | None = None,
    *,
    pending: bool = False,
    core_id: str | None = None,
    after: tuple[str, str] | None = None,
    limit: int = INDEX_BATCH,
) -> list[Doc]:
    """Slices with their messages' texts, oldest first: those named, or (``pending``) those
    not indexed yet, or (neither) all, of ``core_id`` when given, after ``after``
    (``(created_at, id)`` of the last one of a previous batch)."""
    where: list[str] = []
    params: list[Any] = []
    if slice_ids is not None:
        if not slice_ids:
            return []
        clause, values = _in("s.id", slice_ids)
        where.append(clause)
        params += values
    if pending:
        where.append("NOT s.indexed")
    if core_id is not None:
        where.append("u.core_id = %s")
        params.append(core_id)
    if after is not None:
        where.append("(s.created_at > %s OR (s.created_at = %s AND s.id > %s))")
        params += [after[0], after[0], after[1]]
    condition = " AND ".join(where) or "1 = 1"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.id, s.tenant_id, u.core_id, s.start_index, s.end_index, s.summary "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id WHERE {condition} "
            "ORDER BY s.created_at, s.id LIMIT %s",
            [*params, limit],
        )
        rows = cursor.fetchall()
        if not rows:
            return []
        clause, values = _in("s.id", [row[0] for row in rows])
        cursor.execute(
            f'SELECT s.id, m."index", m.text FROM {SLICE} s JOIN {MESSAGE} m '
            f'ON m.unit_id = s.unit_id AND m."index" >= s.start_index AND m."index" < s.end_index '
            f"WHERE {clause}",
            values,
        )
        texts: dict[str, dict[int, str]] = defaultdict(dict)
        for slice_id, index, body in cursor.fetchall():
            texts[slice_id][int(index)] = body
    return [
        Doc(
            slice_id=slice_id,
            tenant_id=int(tenant_id),
            core_id=core_id_,
            start_index=int(start),
            summary=summary,
            messages=tuple(texts[slice_id].get(i, "") for i in range(int(start), int(end))),
        )
        for slice_id, tenant_id, core_id_, start, end, summary in rows
    ]


def slice_created(slice_id: str) -> tuple[str, str] | None:
    """``(created_at, id)`` of a slice as :func:`load_docs` pages by, in SQL form."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT created_at, id FROM {SLICE} WHERE id = %s", [slice_id])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


# --- writing the full-text index ----------------------------------------------------------------


def index_fulltext(docs: Sequence[Doc], *, rebuild: bool = False) -> int:
    """Put the docs into the full-text index, in one transaction; returns how many.

    Idempotent: a slice indexed already is left alone, unless ``rebuild`` (its entry
    is written again, from the current tokenizer).
    """
    if not docs:
        return 0
    made = [(doc, document(doc)) for doc in docs]
    done = 0
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        guard = "" if rebuild else " AND NOT s.indexed"
        if connection.vendor == "postgresql":
            # One statement for the batch. A document's distinct tokens travel as one
            # space-joined string (a token is letters and digits only, never a space):
            # unnest() cannot take an array of arrays of different lengths.
            cursor.execute(
                f"UPDATE {SLICE} s SET "
                "search_document = array_to_tsvector(string_to_array(v.lexemes, ' ')), "
                "search_text = v.body, search_length = v.length, indexed = true, "
                f"search_rowid = nextval('{postings.SEQUENCE}') "
                "FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[]) "
                f"AS v(id, lexemes, body, length) WHERE s.id = v.id{guard}",
                [
                    [doc.slice_id for doc, _ in made],
                    [" ".join(item.lexemes) for _, item in made],
                    [item.body for _, item in made],
                    [item.length for _, item in made],
                ],
            )
            return max(int(cursor.rowcount), 0)
        # SQLite: the transaction holds the write lock, so the read and the writes agree.
        for doc, item in made:
            if rebuild:
                cursor.execute(
                    f"DELETE FROM {FTS_TABLE} WHERE rowid = "
                    f"(SELECT search_rowid FROM {SLICE} WHERE id = %s)",
                    [doc.slice_id],
                )
            cursor.execute(
                f"INSERT INTO {FTS_TABLE} (body, scope) VALUES (%s, %s)",
                [item.body, f"{tenant_token(doc.tenant_id)} {core_token(doc.core_id)}"],
            )
            rowid = cursor.lastrowid
            cursor.execute(
                f"UPDATE {SLICE} AS s SET search_rowid = %s, search_length = %s, indexed = 1 "
                f"WHERE s.id = %s{guard}",
                [rowid, item.length, doc.slice_id],
            )
            if cursor.rowcount:
                done += 1
            else:
                cursor.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid = %s", [rowid])
    return done


def index_vectors(docs: Sequence[Doc], *, embedder: Embedder | None = None) -> int:
    """Embed and store the docs' vectors; 0 with a logged warning when the embedder
    fails (the slices keep their full text; ``reindex_memory`` embeds them later)."""
    if not docs:
        return 0
    embedder = embedder or embedder_or_none("indexing")
    if embedder is None:
        return 0
    try:
        return vectors.store(docs, embedder)
    except EmbeddingError as exc:
        _no_vectors(len(docs), exc)
        return 0


def _no_vectors(count: int, exc: EmbeddingError) -> None:
    logger.warning(
        "memory indexing: %d slice(s) left without vectors, the embedder failed (%s): %s",
        count,
        exc.code,
        exc,
    )


def index_docs(docs: Sequence[Doc]) -> int:
    """Full text and vectors of these slices, after their transaction committed: embedded
    first, with no transaction open, then both written in one short transaction (the
    full text alone when the embedder fails, with a warning)."""
    if not docs:
        return 0
    embedder = embedder_or_none("indexing")
    found: list[np.ndarray] | None = None
    if embedder is not None:
        try:
            found = vectors.matrices(docs, embedder)
        except EmbeddingError as exc:
            _no_vectors(len(docs), exc)
    with transaction.atomic():
        done = index_fulltext(docs)
        if embedder is not None and found is not None:
            vectors.write(docs, found, embedder)
    return done


def index_slices(slice_ids: Sequence[str] | None = None, *, limit: int = INDEX_BATCH) -> int:
    """Index slices: the ones named (full text where missing, and vectors where missing),
    or up to ``limit`` of those not in the full-text index yet (full text and vectors).
    Idempotent. Returns how many entered the full-text index."""
    if slice_ids is None:
        return index_docs(load_docs(pending=True, limit=limit))
    total = 0
    for offset in range(0, len(slice_ids), limit):
        docs = load_docs(slice_ids[offset : offset + limit], limit=limit)
        total += index_fulltext(docs)
        embedder = embedder_or_none("indexing")
        if embedder is not None:
            have = set(
                vectors.MemoryVectors.objects.filter(
                    slice_id__in=[d.slice_id for d in docs], model=embedder.name
                ).values_list("slice_id", flat=True)
            )
            index_vectors([d for d in docs if d.slice_id not in have], embedder=embedder)
    return total


def index_pending(*, batch: int = INDEX_BATCH) -> int:
    """Index every slice not in the full-text index yet, full text and vectors
    (``roll_dialogs`` runs it before each sweep: a process that died between a
    rolling's commit and its consumer, or with slices waiting in
    ``memory.indexing``'s batch); returns how many. Vectors that a failing embedder
    left out of slices already indexed are ``reindex_memory``'s job."""
    total = 0
    while True:
        done = index_slices(limit=batch)
        total += done
        if done < batch:
            return total


def index_slice(*, doc: Doc) -> bool:
    """Index one slice whose texts the caller holds; False if it was indexed already."""
    return bool(index_docs([doc]))


# --- searching ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """The searched memory: the tenant's slices, of ``core_ids`` unless ``whole_tenant``."""

    tenant_id: int
    core_ids: tuple[str, ...]  # most recently active first
    whole_tenant: bool = False
    unit_ids: tuple[str, ...] | None = None  # the cores' units (read by :func:`with_units`)


def with_units(scope: Scope) -> Scope:
    """The scope with its cores' units: slices are narrowed by ``unit_id`` directly (a
    join to the units made PostgreSQL compare every slice's unit with each one)."""
    if scope.whole_tenant or scope.unit_ids is not None:
        return scope
    units = MemoryUnit.objects.filter(tenant_id=scope.tenant_id, core_id__in=scope.core_ids)
    return replace(scope, unit_ids=tuple(units.values_list("id", flat=True)))


@dataclass
class Candidate:
    """What a search reads of one slice it may return."""

    slice_id: str
    core_id: str
    start_index: int
    body: str = ""
    length: int = 0  # tokens in the body


@dataclass(frozen=True)
class Found:
    """One hit: the slice, its rank, and its best messages' indexes (best first)."""

    slice_id: str
    rank: int
    messages: tuple[int, ...]


@dataclass
class Lexical:
    order: list[str] = field(default_factory=list)  # slice ids, best first (the window)
    idf: dict[str, float] = field(default_factory=dict)
    found: dict[str, Candidate] = field(default_factory=dict)  # slice id → candidate
    dropped: set[str] = field(default_factory=set)  # matched terms :func:`salient` left out


def _fts_scope(scope: Scope) -> str:
    if scope.whole_tenant or len(scope.core_ids) > SCOPE_CORES_MAX:
        return f'scope : "{tenant_token(scope.tenant_id)}"'
    return "scope : (" + " OR ".join(f'"{core_token(c)}"' for c in scope.core_ids) + ")"


def _slice_scope(scope: Scope) -> tuple[str, list[Any]]:
    """SQL narrowing ``s`` (the slice table) to the scope, with its parameters."""
    if scope.whole_tenant:
        return "s.tenant_id = %s", [scope.tenant_id]
    units = with_units(scope).unit_ids
    if not units:
        return "1 = 0", []
    clause, values = _in("s.unit_id", units)
    return f"s.tenant_id = %s AND {clause}", [scope.tenant_id, *values]


def _candidates(cursor: Any, where: str, params: list[Any]) -> list[tuple[Any, Candidate]]:
    """(key, candidate) of slices ``s`` matching ``where``, with their token lines; the key
    is the full-text row (SQLite's rowid, PostgreSQL's slice id)."""
    if connection.vendor == "postgresql":
        cursor.execute(
            f"SELECT s.id, s.id, u.core_id, s.start_index, coalesce(s.search_text, ''), "
            f"coalesce(s.search_length, 0) "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id WHERE {where}",
            params,
        )
    else:
        cursor.execute(
            f"SELECT s.search_rowid, s.id, u.core_id, s.start_index, coalesce(f.body, ''), "
            f"coalesce(s.search_length, 0) "
            f"FROM {SLICE} s JOIN {UNIT} u ON u.id = s.unit_id "
            f"LEFT JOIN {FTS_TABLE} f ON f.rowid = s.search_rowid WHERE {where}",
            params,
        )
    return [
        (
            key,
            Candidate(slice_id=sid, core_id=core, start_index=int(start), body=body, length=int(n)),
        )
        for key, sid, core, start, body, n in cursor.fetchall()
    ]


def _member_scope(scope: Scope) -> tuple[str, list[Any]]:
    """SQL keeping the slices ``s`` of the scope, for a lookup by slice id (a subquery on
    the cores' units: no list of every unit). ``+s.tenant_id``: a condition no index
    serves, so SQLite with no statistics looks the slices up by id rather than walking
    every slice of the tenant by its tenant index (~10 ms at 10,000 slices)."""
    if scope.whole_tenant:
        return "+s.tenant_id = %s", [scope.tenant_id]
    if not scope.core_ids:
        return "1 = 0", []
    clause, values = _in("mu.core_id", scope.core_ids)
    return (
        f"+s.tenant_id = %s AND s.unit_id IN (SELECT mu.id FROM {UNIT} mu "
        f"WHERE +mu.tenant_id = %s AND {clause})",
        [scope.tenant_id, scope.tenant_id, *values],
    )


def candidates(scope: Scope, slice_ids: Sequence[str]) -> dict[str, Candidate]:
    """The scope's slices among ``slice_ids``, with their token lines."""
    if not slice_ids:
        return {}
    clause, values = _in("s.id", slice_ids)
    where, params = _member_scope(scope)
    with connection.cursor() as cursor:
        rows = _candidates(cursor, f"{clause} AND {where}", values + params)
    return {c.slice_id: c for _, c in rows}


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
        # The tenant's postings, narrowed to the scope's cores by their slices.
        sql += f" AND rowid IN (SELECT s.search_rowid FROM {SLICE} s WHERE {where})"
        extra = params
    fts_scope = _fts_scope(scope)
    return sql, [[f'body : "{w}" AND {fts_scope}', *extra] for w in words]


def lexical(
    scope: Scope,
    words: Sequence[str],
    *,
    window: int,
    boosts: dict[str, float] | None = None,
) -> Lexical:
    """The full-text ranking of the scope's slices for ``words``: its best ``window``
    (the module's docstring, step 1).

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
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            stats = _head_postgres(cursor, scope, words, window, boosts)
        else:
            stats = _head_sqlite(cursor, scope, words, window, boosts)
        if stats is None:
            return out
        total, length, held, head = stats
        average = max(float(length) / total, 1.0)
        out.idf = {
            w: weight(total, n) * boosts.get(w, 1.0) for w, n in zip(words, held, strict=True) if n
        }
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
    empty: the hits' token lines are read by the caller (:func:`candidates`)."""
    out = Lexical()
    seen = postings.signatures(scope.tenant_id, scope.core_ids)
    held: list[_Held] = []
    for core_id in scope.core_ids:
        if core_id not in seen:
            continue
        entry = postings.cache.get(scope.tenant_id, core_id)
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
                        postings={w: entry.postings(w) for w in words},
                    )
                )
    postings.cache.trim()
    total = sum(h.count for h in held)
    holding = [sum(len(h.postings[w][0]) for h in held) for w in words]
    if not total or not any(holding):
        return out
    total = max(total, *holding)
    average = max(float(sum(h.length for h in held)) / total, 1.0)
    boosts = boosts or {}
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
    postings: dict[str, tuple[np.ndarray, np.ndarray]]


Head = tuple[int, float, list[int], list[Any]]  # N, total length, each word's n, the window


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
    held = [int(n) for n in holding]
    if not total or not any(held):
        return None
    total = max(int(total), *held)
    kept = [
        (weight(total, n) * boosts.get(w, 1.0), values)
        for w, n, values in zip(words, held, word_params, strict=True)
        if n
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
    """One statement: each word's matches read once (materialized), counted, weighted
    (the idf of :func:`weight`, in SQL, times the word's boost) and summed per slice."""
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
        "w AS (SELECT df.t, df.n, ln(1 + (greatest(size.total, df.n) - df.n + 0.5) "
        "/ (df.n + 0.5)) * (%s::float8[])[df.t + 1] AS w FROM df, size), "
        "top AS (SELECT m.key, sum(w.w) AS score FROM m JOIN w USING (t) GROUP BY m.key "
        "ORDER BY score DESC, m.key DESC LIMIT %s) "
        "SELECT 'k', key, score FROM top "
        "UNION ALL SELECT 'n', t::text, n FROM w "
        "UNION ALL SELECT 'size', total::text, length FROM size",
        [
            *params,
            *(v for values in word_params for v in values),
            [boosts.get(w, 1.0) for w in words],
            window,
        ],
    )
    held = [0] * len(words)
    head: list[tuple[str, float]] = []
    total, length = 0, 0.0
    for kind, key, number in cursor.fetchall():
        if kind == "k":
            head.append((key, float(number)))
        elif kind == "n":
            held[int(key)] = int(number)
        else:
            total, length = int(float(key)), float(number)
    if not total or not any(held):
        return None
    head.sort(key=lambda item: item[0], reverse=True)  # the newest first, among equals
    head.sort(key=lambda item: -item[1])
    return max(total, *held), length, held, [key for key, _ in head]


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


def best_message_matches(
    order: Sequence[str], found: dict[str, Candidate], idf: dict[str, float]
) -> list[str]:
    """The passage ranking: the slices of ``order`` by their best single message, where a
    message scores the sum of the idf of the distinct query tokens it holds (each
    token once, however often it is said), plus :data:`NEIGHBOUR_SHARE` of the idf of
    those only the message before or after it holds (:func:`_best_line`); ties keep
    ``order``'s order, and a slice whose messages hold no query token (a match in its
    summary alone) is left out.

    Why: the answer to a question is usually one message, while a slice's BM25 sums
    every message of its range, so a slice that repeats one of the query's words
    across its messages can outrank the one where a single message says them all.
    This ranking rewards query words said *together*; fused with the slice's BM25 it
    breaks such ties toward the message that holds the whole question. The
    neighbours' share: an answer often spans a question and its reply, or two turns
    of one speaker ("we got a puppy" … "we called her Olive"). Line 0 of a body is the
    summary and is not a message.
    """
    scored: dict[str, float] = {}
    for slice_id in order:
        candidate = found.get(slice_id)
        if candidate is None:
            continue
        best = _best_line(_lines_holding(candidate.body, idf), idf)
        if best > 0:
            scored[slice_id] = best
    place = {slice_id: i for i, slice_id in enumerate(order)}
    return sorted(scored, key=lambda s: (-scored[s], place[s]))


def _lines_holding(body: str, idf: dict[str, float]) -> dict[int, set[str]]:
    """Which of the ``idf`` tokens each message line of a body holds (lines after the
    first; only lines holding one). Each
    token's occurrences are found in the whole body at C speed and placed on their
    lines by the newline offsets."""
    holding: dict[int, set[str]] = defaultdict(set)
    for line, t, _tf in _occurrences(body, idf):
        holding[line].add(t)
    return holding


def _occurrences(body: str, idf: dict[str, float]) -> list[tuple[int, str, int]]:
    """``(line, token, count)`` of each ``idf`` token on each message line of a body that
    holds it (line 0, the summary, left out): each token's occurrences found in the
    whole body at C speed and placed on their lines by the newline offsets (found
    once, and only when a token is there)."""
    spaced = " " + body.replace(" ", "  ").replace("\n", " \n ") + " "
    newlines: list[int] | None = None
    out: list[tuple[int, str, int]] = []
    for t in idf:
        needle = f" {t} "
        at = spaced.find(needle)
        if at < 0:
            continue
        if newlines is None:
            newlines = [m.start() for m in _NEWLINE.finditer(spaced)]
        counts: dict[int, int] = defaultdict(int)
        while at >= 0:
            counts[bisect.bisect(newlines, at)] += 1
            at = spaced.find(needle, at + 1)
        out += [(line, t, n) for line, n in counts.items() if line]
    return out


_NEWLINE = re.compile("\n")


def _best_line(holding: dict[int, set[str]], idf: dict[str, float]) -> float:
    """The largest score of one message line: the sum of idf of the distinct tokens it
    holds, plus :data:`NEIGHBOUR_SHARE` of those its neighbours hold and it does not."""
    best = 0.0
    for line, own in holding.items():
        score = sum(idf[t] for t in own)
        near = set().union(holding.get(line - 1, ()), holding.get(line + 1, ())) - own
        score += NEIGHBOUR_SHARE * sum(idf[t] for t in near)
        best = max(best, score)
    return best


def dense_query(query: str, full: Lexical) -> str:
    """The text the query's vector is embedded from: ``query`` without the words whose
    full-text terms :func:`salient` dropped (held by so many of the searched slices that
    they say nothing of which one holds the answer). The offline model's vector is a mean
    of token vectors, so such a word pulls the query toward every message that says it:
    a question naming its person ("What hobby did Samuel take up?") lands nearest the
    greetings ("Bye Samuel, take care!"). Words the memory does not hold at all are kept
    ("relocating": meaning is all that can find them), as are CJK runs. Dropping
    expansion terms changes nothing (they are not in the query). The whole query when no
    word would be left."""
    kept = text.without_words(query, full.dropped)
    return kept if any(char.isalnum() for char in kept) else query


def _query_vector(query: str, embedder: Embedder) -> np.ndarray | None:
    try:
        return embed_texts([query], embedder=embedder)[0]
    except EmbeddingError as exc:
        logger.warning(
            "memory search: the query could not be embedded (%s: %s); full-text results only",
            exc.code,
            exc,
        )
        return None


def fuse(rankings: Iterable[Sequence[str]], weights: Sequence[float] = ()) -> list[str]:
    """Reciprocal-rank fusion: ids by ``Σ 1 / (RRF_K + rank)`` over the rankings (ranks
    from 1), ties to the better rank in the first ranking, then the next, then the
    newest id."""
    lists = list(rankings)
    ranks = [{item: i for i, item in enumerate(ranking, 1)} for ranking in lists]
    score: dict[str, float] = defaultdict(float)
    for n, ranked in enumerate(ranks):
        weight = weights[n] if n < len(weights) else 1.0
        for item, rank in ranked.items():
            score[item] += weight / (RRF_K + rank)
    missing = 1 << 30

    def key(item: str) -> tuple[Any, ...]:
        return (-score[item], *(r.get(item, missing) for r in ranks))

    return sorted(sorted(score, reverse=True), key=key)


def search(*, scope: Scope, query: str, limit: int = 10) -> list[Found]:
    """The best ``limit`` slices of the scope for ``query``, best first (module docstring).

    The query must have passed :func:`terms`; with no tokens the answer is ``[]``.
    Each ranking is cut to its best ``max(RERANK, limit)`` (the rank window) before
    fusion, as Elasticsearch's reciprocal-rank fusion cuts to its ``rank_window_size``.
    """
    words = terms(query)
    if not words or not scope.core_ids:
        return []
    window = max(RERANK, limit)
    boosts = expansion(query, words)
    full = lexical(scope, [*words, *boosts], window=window, boosts=boosts)
    # The token lines of the BM25 order's head, for the best-message ranking (and the
    # hits' messages); with the whole window p50 at 10,000 slices was 55 ms, with 20 35 ms.
    head = full.order[: max(PASSAGES, limit)]
    found = dict(full.found)
    found.update(candidates(scope, [s for s in head if s not in found]))
    passages = best_message_matches(head, found, full.idf)
    embedder = embedder_or_none("search")
    # The dense query leaves out the words full text found too common here to rank by
    # (:func:`salient`: the person's name in every greeting, "recently"); see
    # :func:`dense_query`.
    query_vector = None if embedder is None else _query_vector(dense_query(query, full), embedder)
    dense_ids: list[str] = []
    if embedder is not None and query_vector is not None:
        dense = vectors.dense_ranking(
            scope.core_ids[:DENSE_CORES_MAX],
            query_vector,
            embedder,
            also=full.order,
            minimum=dense_minimum(),
        )
        dense_ids = [slice_id for slice_id, _ in dense[:window]]
    ranked = fuse([full.order, passages, dense_ids], [1.0, passage_weight(), dense_weight()])
    hits: list[str] = []
    start = 0
    while len(hits) < limit and start < len(ranked):
        # Slices found by meaning only are read (and so checked to be in the scope) first.
        batch = ranked[start : start + limit - len(hits)]
        found.update(candidates(scope, [s for s in batch if s not in found]))
        hits += [s for s in batch if s in found]
        start += len(batch)
    return [
        Found(
            slice_id=slice_id,
            rank=rank,
            messages=best_messages(found[slice_id], full.idf, query_vector, embedder),
        )
        for rank, slice_id in enumerate(hits, 1)
    ]


def best_messages(
    candidate: Candidate,
    idf: dict[str, float],
    query_vector: np.ndarray | None,
    embedder: Embedder | None,
) -> tuple[int, ...]:
    """The indexes of the slice's best-matching messages, best first (at most
    :data:`MESSAGES_PER_HIT`): fused ranks of their full-text and dense scores."""
    per_line: dict[int, float] = defaultdict(float)
    for line, t, tf in _occurrences(candidate.body, idf):
        per_line[line] += idf[t] * tf / (tf + K1)  # in the query's order, as before
    scored = {
        str(candidate.start_index + line - 1): score  # line 0 is the summary
        for line, score in sorted(per_line.items())
        if score
    }
    by_words = sorted(scored, key=lambda i: (-scored[i], int(i)))
    by_meaning: list[str] = []
    if query_vector is not None and embedder is not None:
        sims = vectors.message_scores(candidate.core_id, candidate.slice_id, query_vector, embedder)
        minimum = dense_minimum()
        by_meaning = [
            str(i)
            for i, s in sorted(sims.items(), key=lambda item: (-item[1], item[0]))
            if s > minimum
        ]
    ranked = fuse([by_words, by_meaning]) if by_meaning else by_words
    return tuple(int(i) for i in ranked[:MESSAGES_PER_HIT])


# --- snippets ------------------------------------------------------------------------------------

SNIPPET_CHARS = 200


def snippet(body: str, words: Iterable[str], *, size: int = SNIPPET_CHARS) -> str:
    """About ``size`` characters of ``body`` around its first match of ``words`` (its
    start when none matches), white space collapsed, cuts marked with ``…``."""
    place = text.locate(body, frozenset(words))
    if place is None:
        start = 0
    else:
        middle = (place[0] + place[1]) // 2
        start = max(0, min(middle - size // 2, len(body) - size))
    end = min(len(body), start + size)
    piece = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + piece + ("…" if end < len(body) else "")
