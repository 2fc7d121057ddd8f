"""A query's terms: its tokens (:func:`terms`), the nearest words it is expanded by
(:func:`expansion`), the idf a term weighs (:func:`weight`) and the terms that rank
(:func:`salient`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from .. import text
from ..embeddings import neighbours
from ..exceptions import InvalidQuery

QUERY_MAX = 1000
TERMS_MAX = 32
LIMIT_MAX = 100


def terms(query: Any) -> list[str]:
    """The distinct tokens of ``query`` (at most ``TERMS_MAX``), in order.

    A query of more distinct tokens keeps its words and CJK character pairs first, and
    then as many of its single CJK characters as fit: a character alone says least (a
    pair holds it), and a long Chinese query, whose characters come before its pairs,
    lost every pair (QA). Raises ``InvalidQuery`` for a non-string or a query over
    ``QUERY_MAX`` characters.
    """
    if not isinstance(query, str):
        raise InvalidQuery("a query must be a string")
    if len(query) > QUERY_MAX:
        raise InvalidQuery(f"a query is at most {QUERY_MAX} characters")
    tokens = list(dict.fromkeys(text.query_tokens(query)))
    if len(tokens) <= TERMS_MAX:
        return tokens
    single = [t for t in tokens if len(t) == 1 and text.has_cjk(t)]
    first = [t for t in tokens if not (len(t) == 1 and text.has_cjk(t))][:TERMS_MAX]
    kept = {*first, *single[: TERMS_MAX - len(first)]}
    return [t for t in tokens if t in kept]


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
