"""A query's terms: its tokens (:func:`tokens`, :func:`terms`), the ones full text
searches (:func:`informative`), the nearest words it is expanded by
(:func:`expansion`), the idf a term weighs (:func:`weight`) and the terms that rank
(:func:`salient`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any

from django.conf import settings

from .. import text
from ..embeddings import neighbours
from ..exceptions import InvalidQuery

QUERY_MAX = 1000
TERMS_MAX = 32  # query terms searched by full text (bounds the work of one search)
TERMS_POOL = 2 * TERMS_MAX  # terms whose exact counts a search of the database reads
LIMIT_MAX = 100


def tokens(query: Any) -> list[str]:
    """The distinct tokens of ``query``, in order, none cut (the full text keeps
    :data:`TERMS_MAX` of them, by the searched memory: :func:`informative`).

    Raises ``InvalidQuery`` for a non-string or a query over ``QUERY_MAX`` characters.
    """
    if not isinstance(query, str):
        raise InvalidQuery("a query must be a string")
    if len(query) > QUERY_MAX:
        raise InvalidQuery(f"a query is at most {QUERY_MAX} characters")
    return list(dict.fromkeys(text.query_tokens(query)))


def _single(token: str) -> bool:
    """A CJK character alone: it says less than a pair that holds it."""
    return len(token) == 1 and text.has_cjk(token)


def preferred(words: Sequence[str], most: int) -> list[str]:
    """The first ``most`` of ``words`` with no knowledge of the memory, in their order:
    words and CJK character pairs first, then as many single CJK characters as fit (a
    character alone says least; a long Chinese query, whose characters come before its
    pairs, lost every pair, QA)."""
    if len(words) <= most:
        return list(words)
    first = [t for t in words if not _single(t)][:most]
    kept = {*first, *[t for t in words if _single(t)][: most - len(first)]}
    return [t for t in words if t in kept]


def terms(query: Any) -> list[str]:
    """The distinct tokens of ``query``, cut to ``TERMS_MAX`` without the memory
    (:func:`preferred`): whether a query has any tokens at all. The search itself cuts
    :func:`tokens` by the searched memory (:func:`informative`).

    Raises ``InvalidQuery`` for a non-string or a query over ``QUERY_MAX`` characters.
    """
    return preferred(tokens(query), TERMS_MAX)


def required(query: Any) -> list[str]:
    """The tokens a slice must all hold to match ``query`` word for word (the admin's
    search: :func:`memory.search.fulltext.holding_all`): its words and CJK pairs, its
    single CJK characters only when it has nothing else (a pair already holds them), at
    most :data:`TERMS_MAX`. Raises ``InvalidQuery`` as :func:`tokens`."""
    words = tokens(query)
    return ([t for t in words if not _single(t)] or words)[:TERMS_MAX]


def informative(
    words: Sequence[str], holding: Sequence[int], exempt: Collection[str] = ()
) -> list[str]:
    """The query terms full text searches: of ``words`` (each held by ``holding[i]`` of
    the searched slices), the :data:`TERMS_MAX` rarest, in the query's order; terms in
    ``exempt`` (expansion terms, bounded by :data:`EXPANSION_MAX`) are kept apart.

    Invariant: a term held by fewer of the searched slices (a larger idf, as the total is
    the same) is never dropped for one held by more; ties keep words and pairs before
    single CJK characters, then the earlier in the query. Why: the cap (it bounds a
    search's work) used to keep a query's first terms, and the rare term that tells the
    answer apart (a name, a place) often ends a long question (QA). A term the memory
    does not hold cannot match: it is dropped and takes no place from one that can.
    """
    place = {w: i for i, w in enumerate(words)}
    count = dict(zip(words, holding, strict=True))
    capped = [w for w in words if count[w] and w not in exempt]
    capped.sort(key=lambda w: (count[w], _single(w), place[w]))
    kept = set(capped[:TERMS_MAX])
    return [w for w in words if count[w] and (w in kept or w in exempt)]


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


def expansion_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_EXPANSION_WEIGHT", 0.5))
