"""Writing the index: full text on either engine (:func:`index_fulltext`), vectors
(:func:`index_vectors`), both after a rolling's commit (:func:`index_docs`), and the
catch-up of what a dead process left out (:func:`index_pending`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
from django.db import connection, transaction

from .. import postings, vectors
from ..embeddings import Embedder, EmbeddingError
from ..vectors import Doc
from .dense import embedder_or_none
from .documents import INDEX_BATCH, document, load_docs
from .scope import core_token, tenant_token
from .tables import FTS_TABLE, SLICE

# The records keep the name they always had (docs/memory.md: a logged warning,
# ``memory.search``), whichever module of the package logs them.
logger = logging.getLogger("memory.search")


# SQL below is assembled from table names (the models' Meta) and fixed fragments;
# every value is a bound parameter, and tokens are letters and digits only.


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
