"""Query expansion: an English word's nearest words in the offline model's token table.

A question is often worded apart from what was said ("vehicle" for "car", "injury"
for "hurt", "novel" for "book"), and full text then finds nothing. The offline
model (``offline.py``, WordLlama ``l2_supercat``) holds one trained 256-dimension
row per token of the Llama 2 tokenizer; about 13,000 of its tokens are whole
lower-case English words (``▁car``, ``▁vehicle``). Their rows' cosines give each
such word its nearest words (``vehicle``: ``car`` 0.69, ``sedan`` 0.53; ``injury``:
``hurt`` 0.50), which search adds to a query as extra terms, weighted below the
query's own (``memory.search``, "Expansion").

Only whole-word tokens on both sides: a word the tokenizer cuts into pieces
("relocating" → "▁reloc", "ating") has no row of its own, and the mean of its
pieces' rows is noise, so it is not expanded.

A word's neighbours are computed on its first lookup (one product over the
~13,000 whole-word rows, ~0.3 ms) and kept: at most :data:`PER_WORD`, at a cosine
of at least :data:`FLOOR`. Nothing is downloaded; without the ``wordllama`` package
(or its files) there are no neighbours and search is unchanged.
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache

import numpy as np

from .offline import OfflineEmbedder

logger = logging.getLogger(__name__)

PER_WORD = 8  # neighbours kept per word
FLOOR = 0.45  # the lowest cosine kept
MIN_CHARS = 3  # shorter tokens are mostly pieces of words


def _words(vocab: dict[str, int]) -> tuple[list[str], list[int]]:
    """The whole-word tokens: ``▁`` then ASCII letters, lower case (``▁Ford`` is left for
    ``▁ford``; a query is folded to lower case)."""
    names: list[str] = []
    ids: list[int] = []
    for token, i in sorted(vocab.items(), key=lambda item: item[1]):
        word = token[1:]
        if (
            token.startswith("\u2581")
            and len(word) >= MIN_CHARS
            and word.isascii()
            and word.isalpha()
            and word.islower()
        ):
            names.append(word)
            ids.append(i)
    return names, ids


class Table:
    """The whole-word rows (unit vectors) and their words; :meth:`of` a word's nearest."""

    def __init__(self, table: np.ndarray, vocab: dict[str, int]) -> None:
        self.names, ids = _words(vocab)
        self.row = {name: i for i, name in enumerate(self.names)}
        rows = table[np.asarray(ids, dtype=np.int64)].astype(np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.rows = rows / norms

    @lru_cache(maxsize=100_000)  # noqa: B019 (one table per process, kept)
    def of(self, word: str) -> tuple[tuple[str, float], ...]:
        """``word``'s nearest words (not itself) at a cosine of at least :data:`FLOOR`,
        best first, at most :data:`PER_WORD`; ``()`` when it has no row of its own.
        One product over the ~13,000 rows (numpy's own loop, ~0.3 ms), then kept."""
        i = self.row.get(word)
        if i is None or len(self.names) <= PER_WORD + 1:
            return ()
        sims = np.einsum("ij,j->i", self.rows, self.rows[i])
        sims[i] = -1.0
        top = np.argpartition(-sims, PER_WORD)[:PER_WORD]
        picked = sorted(((float(sims[j]), int(j)) for j in top), key=lambda p: (-p[0], p[1]))
        return tuple((self.names[j], s) for s, j in picked if s >= FLOOR)


_table: Table | None = None
_failed = False
_lock = threading.Lock()


def table() -> Table | None:
    """The process's table (read on first use; None when the model cannot be read)."""
    global _table, _failed
    if _table is not None or _failed:
        return _table
    with _lock:
        if _table is None and not _failed:
            try:
                model = OfflineEmbedder.shared()._loaded()
                _table = Table(model.table, model.tokenizer.get_vocab())
            except Exception as exc:  # no package, unreadable files: no expansion
                logger.warning(
                    "memory search: no query expansion (%s: %s)", type(exc).__name__, exc
                )
                _failed = True
        return _table


def of(word: str) -> tuple[tuple[str, float], ...]:
    """``word``'s nearest words with their cosines, best first (``()`` when it has no
    row of its own, or there is no table)."""
    found = table()
    return () if found is None else found.of(word)
