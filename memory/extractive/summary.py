"""The extractive summary: sentences chosen within the budget, written in dialogue order.

Sentences with a fact go first, best first, then each fact-less message's first
sentence that is not filler, never filler; they are taken while the summary stays within
:data:`SUMMARY_CHARS` (the summary written is never longer than the sum of the chosen
costs), then written a line per message, ``role: sentence sentence``, with `` … ``
where sentences of one message were left out. A sentence is copied, never rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, NamedTuple

from .scoring import BASE_POINTS, FIRST_POINTS, RANK_DECAY, score
from .splitting import _CJK, _CJK_ENDS, _CLAUSE_MARKS, sentences

SUMMARY_CHARS = 1200
SPOKEN = ("user", "assistant")


class _Candidate(NamedTuple):
    """A sentence; candidates sort best first by their fields in order."""

    tier: int  # 0: holds a fact; 1: leads a message without one; 2: neither
    rank: float  # within tier 0: minus its points (less a little per earlier fact)
    message: int  # index among the spoken messages
    position: int  # index of the sentence in its message
    text: str


def _candidates(spoken: list[tuple[str, str]]) -> list[_Candidate]:
    """Every sentence, with its sort key: facts first (a message's second, third … fact
    a little behind other messages' first), then, of each message that holds no fact, its
    first sentence that is not filler (so it still has its line when there is room)."""
    out: list[_Candidate] = []
    for i, (_, text) in enumerate(spoken):
        scored = [(score(sentence), j, sentence) for j, sentence in enumerate(sentences(text))]
        facts = sorted((-points, j) for points, j, _ in scored if points > BASE_POINTS)
        rank = {j: r for r, (_, j) in enumerate(facts)}
        # A message without a fact: its first sentence that is not filler.
        lead = -1 if rank else next((j for points, j, _ in scored if points > 0), -1)
        for points, j, sentence in scored:
            if j in rank:
                bonus = FIRST_POINTS if j == 0 else 0.0
                out.append(_Candidate(0, RANK_DECAY * rank[j] - points - bonus, i, j, sentence))
            else:
                out.append(_Candidate(1 if j == lead else 2, 0.0, i, j, sentence))
    return out


def extractive(
    messages: Sequence[Mapping[str, Any]],
    *,
    budget: int = SUMMARY_CHARS,
    roles: Sequence[str] = SPOKEN,
) -> str:
    """The sentences that carry facts, ``role: sentence …`` a line per message, oldest first,
    within ``budget`` characters (see the package's docstring).

    ``roles``: the messages read (the others are left out). A message whose role is
    ``""`` is written without a ``role: `` prefix (the history digest reads summary
    lines that name no speaker: ``memory.digest``)."""
    spoken = [
        (str(m["role"]), text)
        for m in messages
        if m.get("role") in roles and (text := str(m.get("text", "")).strip())
    ]
    if not spoken:  # only tool output, say: name what there was
        roles = sorted({str(m.get("role")) for m in messages})
        return f"({len(messages)} messages: {', '.join(roles)})" if messages else ""
    candidates = _candidates(spoken)
    chosen = _choose([c for c in candidates if c.tier < 2], spoken, budget)
    if not chosen:  # nothing but filler: the first sentences, as they come
        chosen = _choose([c for c in candidates if c.position == 0], spoken, budget)
    return _write(chosen, spoken)


def _choose(
    candidates: list[_Candidate], spoken: list[tuple[str, str]], budget: int = SUMMARY_CHARS
) -> list[_Candidate]:
    """Best first while the summary stays within the budget.

    The cost of a sentence is its length plus its line's ``role: `` and line break when
    it is the first of its message, else a separator (at most `` … ``); the summary
    written from the choice is never longer than the sum.
    """
    budget += 1  # the first line has no line break before it
    opened: set[int] = set()
    chosen: list[_Candidate] = []
    said: set[str] = set()  # what the chosen sentences say, once each
    for candidate in sorted(candidates):
        key = _said(candidate.text)
        if key in said:
            # The same sentence again (an assistant that repeats the fact it was told):
            # once is enough, and the room goes to another fact (8 of 20 facts, each
            # echoed, were left out of a summary that held every echo).
            continue
        if candidate.message in opened:
            cost = len(candidate.text) + 3
        else:
            cost = len(spoken[candidate.message][0]) + 3 + len(candidate.text)
        if cost > budget:
            continue
        budget -= cost
        opened.add(candidate.message)
        chosen.append(candidate)
        said.add(key)
    return chosen


def _said(sentence: str) -> str:
    """A sentence as compared with the others: case, white space and the final
    punctuation set aside."""
    return " ".join(sentence.casefold().split()).rstrip(".!?\u3002\uff01\uff1f\u2026 ")


def _cjk_edge(char: str) -> bool:
    return bool(_CJK.match(char)) or char in _CJK_ENDS + _CLAUSE_MARKS


def _write(chosen: list[_Candidate], spoken: list[tuple[str, str]]) -> str:
    """A line per message, its kept sentences in order: neighbours joined as they stood
    in the message (white space collapsed), a gap marked with an ellipsis."""
    by_message: dict[int, list[_Candidate]] = {}
    for candidate in sorted(chosen, key=lambda c: (c.message, c.position)):
        by_message.setdefault(candidate.message, []).append(candidate)
    lines: list[str] = []
    for message, kept in by_message.items():
        text = kept[0].text
        original = " ".join(spoken[message][1].split()) if len(kept) > 1 else ""
        for before, after in pairwise(kept):
            if after.position == before.position + 1:
                text += "" if before.text + after.text in original else " "
            else:
                cjk = _cjk_edge(before.text[-1]) or _cjk_edge(after.text[0])
                text += "\u2026" if cjk else " \u2026 "
            text += after.text
        role = spoken[message][0]
        lines.append(f"{role}: {text}" if role else text)
    return "\n".join(lines)
