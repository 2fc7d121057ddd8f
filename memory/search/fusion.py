"""Reciprocal-rank fusion (:func:`fuse`, step 4, and the weights of its rankings), and
the shapes a search passes around: a slice it may return (:class:`Candidate`), a hit
(:class:`Found`) and the full-text ranking (:class:`Lexical`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

RRF_K = 60


def dense_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_DENSE_WEIGHT", 0.3))


def passage_weight() -> float:
    return float(getattr(settings, "FORGE_MEMORY_PASSAGE_WEIGHT", 0.4))


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
    """One hit: the slice, its rank, and its best messages' indexes (best first);
    ``by_words``: the full text matched it (else it was found by meaning alone)."""

    slice_id: str
    rank: int
    messages: tuple[int, ...]
    by_words: bool = True


@dataclass
class Lexical:
    order: list[str] = field(default_factory=list)  # slice ids, best first (the window)
    idf: dict[str, float] = field(default_factory=dict)
    found: dict[str, Candidate] = field(default_factory=dict)  # slice id → candidate
    dropped: set[str] = field(default_factory=set)  # matched terms :func:`salient` left out


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
