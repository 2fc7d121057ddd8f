"""The search (:func:`search`): the scope's full-text, best-message and dense rankings,
fused by rank."""

from __future__ import annotations

from .. import vectors
from .dense import DENSE_CORES_MAX, _query_vector, dense_minimum, dense_query, embedder_or_none
from .fulltext import RERANK, lexical
from .fusion import Found, dense_weight, fuse, passage_weight
from .passages import PASSAGES, best_message_matches, best_messages
from .query import expansion, tokens
from .scope import Scope, candidates


def search(*, scope: Scope, query: str, limit: int = 10) -> list[Found]:
    """The best ``limit`` slices of the scope for ``query``, best first (the package docstring).

    The query must have passed :func:`terms`; with no tokens the answer is ``[]``. Full
    text is given all of its distinct tokens: it searches the ``TERMS_MAX`` rarest in the
    scope (:func:`informative`), not the first.
    Each ranking is cut to its best ``max(RERANK, limit)`` (the rank window) before
    fusion, as Elasticsearch's reciprocal-rank fusion cuts to its ``rank_window_size``.
    """
    words = tokens(query)
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
    matched = set(full.order)
    return [
        Found(
            slice_id=slice_id,
            rank=rank,
            messages=best_messages(found[slice_id], full.idf, query_vector, embedder),
            by_words=slice_id in matched,
        )
        for rank, slice_id in enumerate(hits, 1)
    ]
