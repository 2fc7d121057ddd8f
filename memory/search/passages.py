"""Ranking by messages: slices by their best single message (:func:`best_message_matches`,
step 2) and a hit's best messages (:func:`best_messages`)."""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .. import vectors
from ..embeddings import Embedder
from .dense import dense_minimum
from .fulltext import K1
from .fusion import Candidate, fuse

PASSAGES = 20  # the best of those whose messages are scored one by one (best message)
NEIGHBOUR_SHARE = 0.5  # of the idf of query tokens held by a message's neighbours only
MESSAGES_PER_HIT = 3


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
