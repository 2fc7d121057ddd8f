"""Cutting a message's text into sentences, for the extractive summary.

A boundary is ``.!?`` followed by white space, the ideographic full stop and the
full-width exclamation and question marks with or without it, or a line break; a
period after an abbreviation (``Mr.``, ``e.g.``, ``J.``) ends no sentence. A sentence
longer than :data:`SENTENCE_CHARS` is cut at its clause marks, and a clause still longer
into pieces of that size. White space is collapsed, nothing else is changed, and the
work is linear in the text. The marks and scripts defined here are shared with
:mod:`.scoring` and :mod:`.summary`.
"""

from __future__ import annotations

import re
from itertools import pairwise

SENTENCE_CHARS = 200

# Closing quotes and brackets that may follow an end mark; the ideographic ends; clause marks.
_CLOSERS = "\"'\u201d\u2019)\\]\u300d\u300f\uff09"
_CJK_ENDS = "\u3002\uff01\uff1f"
_CLAUSE_MARKS = ",;:\uff0c\uff1b\uff1a\u3001"
_HAN = "\u3400-\u9fff\uf900-\ufaff"
# A boundary, its end mark captured (it stays with the sentence before): a Latin end mark
# (and closers) then white space; an ideographic one then anything; ``!?`` right before
# a Han character; a line break. Each branch starts with a mark, so a search skips fast.
_BOUNDARY = re.compile(
    rf"([.!?]+[{_CLOSERS}]*)\s+"
    rf"|([{_CJK_ENDS}]+[{_CLOSERS}]*)\s*"
    rf"|([!?]+[{_CLOSERS}]*)(?=[{_HAN}])"
    r"|\n\s*"
)
# A text with no end mark or line break but at its end is one sentence (a fast test: a
# search for one character of a set).
_MARK = re.compile(rf"[.!?\n{_CJK_ENDS}]")
_ENDS_AND_CLOSERS = ".!?" + _CJK_ENDS + _CLOSERS
# "Mr. Lee", "e.g. this", "J. Smith", "U.S. law": a period that ends no sentence.
_ABBREVIATION = re.compile(
    r"(?:\b(?:Mr|Mrs|Ms|Dr|Prof|St|Mt|Sr|Jr|vs|etc|approx|No|Inc|Ltd|Co|e\.g|i\.e)|\b[A-Z])\.\Z"
)
_CLAUSE_END = re.compile(r"[,;:](?=\s)|[\uff0c\uff1b\uff1a\u3001]")
_CJK = re.compile(rf"[\u3040-\u30ff{_HAN}\uac00-\ud7af]")


def sentences(text: str, limit: int = SENTENCE_CHARS) -> list[str]:
    """``text`` cut into sentences of at most ``limit`` characters, white space collapsed."""
    text = text.strip()
    if not _MARK.search(text.rstrip(_ENDS_AND_CLOSERS)):  # one sentence (most chat lines)
        one = " ".join(text.split())
        return [one] if len(one) <= limit else _cut_long(one, limit)
    parts = _BOUNDARY.split(text)
    pieces: list[str] = []
    for at in range(0, len(parts), 4):
        piece = parts[at] + (
            (parts[at + 1] or parts[at + 2] or parts[at + 3] or "") if at + 1 < len(parts) else ""
        )
        piece = " ".join(piece.split())
        if not piece:
            continue
        if pieces and pieces[-1][-1] == "." and _ABBREVIATION.search(pieces[-1][-8:]):
            pieces[-1] += " " + piece
        else:
            pieces.append(piece)
    out: list[str] = []
    for piece in pieces:
        out.extend([piece] if len(piece) <= limit else _cut_long(piece, limit))
    return out


def _cut_long(sentence: str, limit: int) -> list[str]:
    """A long sentence as runs of its clauses of at most ``limit`` characters each, cut
    after a clause mark (a Latin one when white space follows: not ``9:30``); the runs
    are slices of the sentence, so joined again they give it back."""
    cuts = [match.end() for match in _CLAUSE_END.finditer(sentence)]
    clauses = [sentence[a:b] for a, b in pairwise([0, *cuts, len(sentence)])]
    runs: list[str] = []
    run = ""
    for clause in clauses:
        if run and len(run) + len(clause) > limit:
            runs.append(run.strip())
            run = ""
        run += clause
        while len(run.strip()) > limit:  # no clause mark in reach: at a space, else anywhere
            run = run.strip()
            at = run.rfind(" ", limit // 2, limit)
            at = at if at > 0 else limit
            runs.append(run[:at].strip())
            run = run[at:]
    if run.strip():
        runs.append(run.strip())
    return runs
