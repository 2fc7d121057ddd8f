"""BM25 for the memory benchmarks, with one tokenizer for every language.

Text is lower-cased and its accents folded (NFKD, combining marks dropped, NFC). A run
of Latin letters or digits is one token; a run of CJK characters (Han, kana, hangul)
gives each character and each pair of neighbours (unigrams + bigrams), so Chinese and
Japanese are matched without spaces. No stemming, no stop words.

Scoring is Okapi BM25 with k1 = 1.2, b = 0.75 and idf = ln(1 + (N - n + 0.5) / (n + 0.5));
each distinct query token counts once.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

K1, B = 1.2, 0.75

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_RUN = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")


def fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return unicodedata.normalize(
        "NFC", "".join(c for c in decomposed if not unicodedata.combining(c))
    )


def tokens(text: str) -> list[str]:
    """Latin/digit runs whole; CJK runs as unigrams and bigrams (see the docstring)."""
    out: list[str] = []
    for run in _RUN.findall(fold(text)):
        if _IS_CJK.match(run):
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            out.append(run)
    return out


class BM25:
    def __init__(self, documents: Sequence[list[str]]):
        self.tf = [Counter(d) for d in documents]
        self.length = [len(d) for d in documents]
        self.average = (sum(self.length) / len(documents)) if documents else 0.0
        df = Counter(t for counts in self.tf for t in counts)
        n = len(documents)
        self.idf = {t: math.log(1 + (n - k + 0.5) / (k + 0.5)) for t, k in df.items()}

    def top(self, query: list[str], limit: int) -> list[int]:
        """Documents with a positive score, best first (ties: earlier first)."""
        terms = [t for t in set(query) if t in self.idf]
        scored = []
        for i, counts in enumerate(self.tf):
            norm = K1 * (1 - B + B * self.length[i] / (self.average or 1))
            score = sum(
                self.idf[t] * counts[t] * (K1 + 1) / (counts[t] + norm)
                for t in terms
                if t in counts
            )
            if score > 0:
                scored.append((-score, i))
        return [i for _, i in sorted(scored)[:limit]]
