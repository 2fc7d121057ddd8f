"""Full-text search over slice summaries: SQLite FTS5 or a PostgreSQL ``tsvector``.

* SQLite: the FTS5 table ``memory_slice_fts(summary, scope)`` (porter stemming,
  diacritics folded); a slice's row id is kept in ``MemorySlice.search_rowid``
  and a trigger drops the row when the slice is deleted. ``scope`` holds the
  tenant, so a query only walks its tenant's postings. Ranked by BM25.
* PostgreSQL: the column ``memory_memoryslice.search_document`` with a GIN
  index, built with the text search configuration ``FORGE_MEMORY_SEARCH_CONFIG``
  (default ``english``). Ranked by ``ts_rank_cd``.

The index is kept current by the built-in AfterRolling consumer
:func:`index_consumer`; ``roll_dialogs`` indexes any slice it missed (a
process that died between a rolling's commit and its consumers).

A query is never handed to the database as a query language: it is cut into
words (letters and digits), each searched as a plain term, any of them
matching, the ones matching more ranking higher. FTS syntax in the input
(quotes, ``*``, ``NEAR``, ``OR``, parentheses …) is just text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from .after_rolling import RollingResult
from .exceptions import InvalidQuery
from .models import MemoryCore, MemorySlice, MemoryUnit

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


def search(
    *,
    tenant_id: int,
    words: Sequence[str],
    user_id: int | None = None,
    agent: str | None = None,
    limit: int = 10,
) -> list[tuple[str, float]]:
    """``(slice id, score)`` best first (higher score = better match)."""
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
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            tsquery = " | ".join(f"'{w}'" for w in words)
            cursor.execute(
                f"SELECT s.id, ts_rank_cd(s.search_document, q, 32) AS score "
                f"FROM {SLICE} s CROSS JOIN to_tsquery(%s::regconfig, %s) q{joins} "
                f"WHERE s.search_document @@ q AND s.tenant_id = %s{extra} "
                f"ORDER BY score DESC, s.created_at DESC, s.id DESC LIMIT %s",
                [search_config(), tsquery, tenant_id, *params, limit],
            )
        else:
            cursor.execute(
                f"SELECT s.id, -bm25({FTS_TABLE}, 1.0, 0.0) AS score "
                f"FROM {FTS_TABLE} JOIN {SLICE} s ON s.search_rowid = {FTS_TABLE}.rowid{joins} "
                f"WHERE {FTS_TABLE} MATCH %s AND s.tenant_id = %s{extra} "
                f"ORDER BY score DESC, s.created_at DESC, s.id DESC LIMIT %s",
                [_sqlite_match(words, tenant_id), tenant_id, *params, limit],
            )
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


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
