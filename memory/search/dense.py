"""Dense vectors at query time (step 3): whether they are on, the embedder (or None,
logged once per cause), the text a query is embedded from and its vector. The
ranking itself is ``memory.vectors.dense_ranking``."""

from __future__ import annotations

import logging

import numpy as np
from django.conf import settings

from .. import text
from ..embeddings import Embedder, EmbeddingError, embed_texts, get_embedder
from .fusion import Lexical

# The records keep the name they always had (docs/memory.md: a logged warning,
# ``memory.search``), whichever module of the package logs them.
logger = logging.getLogger("memory.search")


DENSE_CORES_MAX = 32  # cores whose vectors one search reads (the most recently active)


def vectors_enabled() -> bool:
    return bool(getattr(settings, "FORGE_MEMORY_VECTORS", True))


def dense_minimum() -> float:
    return float(getattr(settings, "FORGE_MEMORY_DENSE_MIN_SIMILARITY", 0.0))


def embedder_or_none(purpose: str) -> Embedder | None:
    """The process's embedder, or None (vectors off, or it cannot be built: logged)."""
    if not vectors_enabled():
        return None
    try:
        return get_embedder()
    except Exception as exc:  # misconfigured, not installed, a factory that raised
        message = f"{type(exc).__name__}: {exc}"
        if message not in _unbuilt:  # once per process and cause: it fails every time
            _unbuilt.add(message)
            logger.warning("memory %s: no embedder (%s); full text only", purpose, message)
        return None


_unbuilt: set[str] = set()


def forget_failures() -> None:
    """Warn again about an embedder that cannot be built (its settings changed)."""
    _unbuilt.clear()


def dense_query(query: str, full: Lexical) -> str:
    """The text the query's vector is embedded from: ``query`` without the words whose
    full-text terms :func:`salient` dropped (held by so many of the searched slices that
    they say nothing of which one holds the answer). The offline model's vector is a mean
    of token vectors, so such a word pulls the query toward every message that says it:
    a question naming its person ("What hobby did Samuel take up?") lands nearest the
    greetings ("Bye Samuel, take care!"). Words the memory does not hold at all are kept
    ("relocating": meaning is all that can find them), as are CJK runs. Dropping
    expansion terms changes nothing (they are not in the query). The whole query when no
    word would be left."""
    kept = text.without_words(query, full.dropped)
    return kept if any(char.isalnum() for char in kept) else query


def _query_vector(query: str, embedder: Embedder) -> np.ndarray | None:
    try:
        return embed_texts([query], embedder=embedder)[0]
    except EmbeddingError as exc:
        logger.warning(
            "memory search: the query could not be embedded (%s: %s); full-text results only",
            exc.code,
            exc,
        )
        return None
