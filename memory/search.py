"""Full-text search over slice summaries: SQLite FTS5 or a PostgreSQL ``tsvector``.

* SQLite: the FTS5 table ``memory_slice_fts(summary, scope)`` (porter stemming,
  diacritics folded); a slice's row id is kept in ``MemorySlice.search_rowid``
  and a trigger drops the row when the slice is deleted. ``scope`` holds the
  tenant, so a query only walks its tenant's postings.
* PostgreSQL: the column ``memory_memoryslice.search_document`` with a GIN
  index, built with the text search configuration ``FORGE_MEMORY_SEARCH_CONFIG``
  (default ``english``).

Both rank the same way, from the searched memory alone (:func:`search`): FTS5's
bm25 takes its word statistics from the whole index, every tenant's rows, so its
scores (and the order they give) would move when another tenant's memory gained
a word (issue 17).

The index is kept current by the built-in AfterRolling consumer
:func:`index_consumer`; ``roll_dialogs`` indexes any slice it missed (a
process that died between a rolling's commit and its consumers).

A query is never handed to the database as a query language: it is cut into
words (letters and digits), each searched as a plain term, any of them
matching, the ones matching more ranking higher. FTS syntax in the input
(quotes, ``*``, ``NEAR``, ``OR``, parentheses …) is just text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from .exceptions import InvalidQuery
from .models import MemoryCore, MemorySlice, MemoryUnit
from .results import RollingResult

# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and query words are letters and digits only.

FTS_TABLE = "memory_slice_fts"
SLICE = MemorySlice._meta.db_table
UNIT = MemoryUnit._meta.db_table
CORE = MemoryCore._meta.db_table
QUERY_MAX = 1000
TERMS_MAX = 32
TERM_MAX = 64
LIMIT_MAX = 100
INDEX_BATCH = 500

_TERM = re.compile(r"[^\W_]+")


def terms(query: Any) -> list[str]:
    """The distinct words of ``query`` (at most ``TERMS_MAX``), lower-cased, in order.

    Raises ``InvalidQuery`` for a non-string or a query over ``QUERY_MAX`` characters.
    """
    if not isinstance(query, str):
        raise InvalidQuery("a query must be a string")
    if len(query) > QUERY_MAX:
        raise InvalidQuery(f"a query is at most {QUERY_MAX} characters")
    seen: dict[str, None] = {}
    for word in _TERM.findall(query.lower()):
        if len(word) <= TERM_MAX:
            seen.setdefault(word, None)
        if len(seen) >= TERMS_MAX:
            break
    return list(seen)


def search_config() -> str:
    config = str(getattr(settings, "FORGE_MEMORY_SEARCH_CONFIG", "english"))
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", config):
        raise InvalidQuery(f"FORGE_MEMORY_SEARCH_CONFIG={config!r} is not a configuration name")
    return config


def _sqlite_match(words: Sequence[str], tenant_id: int) -> str:
    phrases = " OR ".join(f'"{w}"' for w in words)  # words hold no quote: letters and digits
    return f'summary : ({phrases}) AND scope : "t{tenant_id}"'


def _tsquery(words: Sequence[str]) -> str:
    return " | ".join(f"'{w}'" for w in words)  # words hold no quote: letters and digits


def weight(total: int, holding: int) -> float:
    """How much matching a word counts: BM25's inverse document frequency, over the
    searched memory alone (``total`` slices, ``holding`` of which hold the word)."""
    return math.log(1 + (total - holding + 0.5) / (holding + 0.5))


def search(
    *,
    tenant_id: int,
    words: Sequence[str],
    user_id: int | None = None,
    agent: str | None = None,
    limit: int = 10,
) -> list[str]:
    """Ids of the matching slices, best first.

    The order depends on the searched memory alone (the tenant's, narrowed to
    ``user_id`` and ``agent`` when given), never on other tenants' rows, which
    share the index (issue 17): first the sum of the weights of the words a slice
    matches (:func:`weight`, from how many of the searched slices hold each word,
    counted here, not taken from the engine's whole-index statistics such as
    FTS5's bm25), then a measure of the slice alone (SQLite: how many of its words
    match; PostgreSQL: ``ts_rank_cd``), then the newest first. Scores are not
    returned: a caller sees ranks.
    """
    if not words:
        return []
    joins = ""
    where: list[str] = []
    params: list[Any] = []
    if user_id is not None or agent is not None:
        joins = f" JOIN {UNIT} u ON u.id = s.unit_id JOIN {CORE} c ON c.id = u.core_id"
        if user_id is not None:
            where.append("c.user_id = %s")
            params.append(user_id)
        if agent is not None:
            where.append("c.agent = %s")
            params.append(agent)
    extra = "".join(f" AND {w}" for w in where)
    scope = (joins, extra, params)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            return _search_postgres(cursor, tenant_id, words, scope, limit)
        return _search_sqlite(cursor, tenant_id, words, scope, limit)


Scope = tuple[str, str, list[Any]]  # joins, extra WHERE, their parameters


def _search_sqlite(
    cursor: Any, tenant_id: int, words: Sequence[str], scope: Scope, limit: int
) -> list[str]:
    joins, extra, params = scope
    matching = (
        f"FROM {FTS_TABLE} JOIN {SLICE} s ON s.search_rowid = {FTS_TABLE}.rowid{joins} "
        f"WHERE {FTS_TABLE} MATCH %s AND s.tenant_id = %s{extra}"
    )
    # One statement: the searched slices, and how many of them hold each word.
    cursor.execute(
        f"SELECT (SELECT count(*) FROM {SLICE} s{joins} WHERE s.tenant_id = %s AND s.indexed"
        f"{extra})" + "".join(f", (SELECT count(*) {matching})" for _ in words),
        [
            tenant_id,
            *params,
            *[v for w in words for v in (_sqlite_match([w], tenant_id), tenant_id, *params)],
        ],
    )
    total, *holding = cursor.fetchone()
    weighted = [(w, weight(total, n)) for w, n in zip(words, holding, strict=True) if n]
    if not weighted:
        return []
    score = " + ".join(
        f"(CASE WHEN s.search_rowid IN (SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} "
        f"MATCH %s) THEN %s ELSE 0.0 END)"
        for _ in weighted
    )
    marked = f"highlight({FTS_TABLE}, 0, char(1), '')"  # each matching word opens a mark
    cursor.execute(
        f"SELECT s.id {matching} ORDER BY ({score}) DESC, "
        f"length({marked}) - length(replace({marked}, char(1), '')) DESC, "
        f"s.created_at DESC, s.id DESC LIMIT %s",
        [
            _sqlite_match([w for w, _ in weighted], tenant_id),
            tenant_id,
            *params,
            *[v for w, x in weighted for v in (_sqlite_match([w], tenant_id), x)],
            limit,
        ],
    )
    return [row[0] for row in cursor.fetchall()]


def _search_postgres(
    cursor: Any, tenant_id: int, words: Sequence[str], scope: Scope, limit: int
) -> list[str]:
    joins, extra, params = scope
    config = search_config()
    cursor.execute(
        f"SELECT (SELECT count(*) FROM {SLICE} s{joins} WHERE s.tenant_id = %s AND s.indexed"
        f"{extra})"
        + "".join(
            f", (SELECT count(*) FROM {SLICE} s{joins} WHERE s.tenant_id = %s{extra} "
            f"AND s.search_document @@ to_tsquery(%s::regconfig, %s))"
            for _ in words
        ),
        [
            tenant_id,
            *params,
            *[v for w in words for v in (tenant_id, *params, config, _tsquery([w]))],
        ],
    )
    total, *holding = cursor.fetchone()
    weighted = [(w, weight(total, n)) for w, n in zip(words, holding, strict=True) if n]
    if not weighted:
        return []
    score = " + ".join(
        "(CASE WHEN s.search_document @@ to_tsquery(%s::regconfig, %s) "
        "THEN %s::float8 ELSE 0.0 END)"
        for _ in weighted
    )
    cursor.execute(
        f"SELECT s.id FROM {SLICE} s CROSS JOIN to_tsquery(%s::regconfig, %s) q{joins} "
        f"WHERE s.search_document @@ q AND s.tenant_id = %s{extra} "
        f"ORDER BY ({score}) DESC, ts_rank_cd(s.search_document, q, 32) DESC, "
        f"s.created_at DESC, s.id DESC LIMIT %s",
        [
            config,
            _tsquery([w for w, _ in weighted]),
            tenant_id,
            *params,
            *[v for w, x in weighted for v in (config, _tsquery([w]), x)],
            limit,
        ],
    )
    return [row[0] for row in cursor.fetchall()]


def index_slices(slice_ids: Sequence[str] | None = None, *, limit: int = INDEX_BATCH) -> int:
    """Put summaries into the index: the slices named (or up to ``limit`` of those not
    indexed yet). Idempotent: an indexed slice is left alone. Returns how many."""
    pending = MemorySlice.objects.filter(indexed=False)
    if slice_ids is not None:
        if not slice_ids:
            return 0
        pending = pending.filter(pk__in=list(slice_ids))
    with transaction.atomic():
        if connection.vendor == "postgresql":
            ids = list(pending.order_by("created_at").values_list("pk", flat=True)[:limit])
            if not ids:
                return 0
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {SLICE} SET search_document = "
                    f"to_tsvector(%s::regconfig, summary), "
                    f"indexed = true WHERE id = ANY(%s) AND NOT indexed",
                    [search_config(), ids],
                )
                return int(cursor.rowcount)
        # SQLite: the transaction holds the write lock, so the read and the writes agree.
        rows = list(
            pending.order_by("created_at").values_list("pk", "tenant_id", "summary")[:limit]
        )
        with connection.cursor() as cursor:
            for slice_id, tenant_id, summary in rows:
                cursor.execute(
                    f"INSERT INTO {FTS_TABLE} (summary, scope) VALUES (%s, %s)",
                    [summary, f"t{tenant_id}"],
                )
                cursor.execute(
                    f"UPDATE {SLICE} SET search_rowid = %s, indexed = 1 WHERE id = %s",
                    [cursor.lastrowid, slice_id],
                )
        return len(rows)


def index_pending(*, batch: int = INDEX_BATCH) -> int:
    """Index every slice not indexed yet; returns how many."""
    total = 0
    while True:
        done = index_slices(limit=batch)
        total += done
        if done < batch:
            return total


def index_slice(*, slice_id: str, tenant_id: int, summary: str) -> bool:
    """Index one slice whose summary the caller holds; False if it was indexed already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # one statement: its own transaction
            cursor.execute(
                f"UPDATE {SLICE} SET search_document = to_tsvector(%s::regconfig, %s), "
                "indexed = true WHERE id = %s AND NOT indexed",
                [search_config(), summary, slice_id],
            )
            return bool(cursor.rowcount)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {FTS_TABLE} (summary, scope) VALUES (%s, %s)",
            [summary, f"t{tenant_id}"],
        )
        rowid = cursor.lastrowid
        cursor.execute(
            f"UPDATE {SLICE} SET search_rowid = %s, indexed = 1 WHERE id = %s AND NOT indexed",
            [rowid, slice_id],
        )
        if cursor.rowcount:
            return True
        cursor.execute(f"DELETE FROM {FTS_TABLE} WHERE rowid = %s", [rowid])
        return False


def index_consumer(result: RollingResult) -> None:
    """The built-in AfterRolling consumer: index the new slice's summary."""
    index_slice(
        slice_id=result.slice_id, tenant_id=result.tenant_id, summary=result.slice["summary"]
    )
