"""Dense vectors for memory search: the embedder interface (see ``base``).

    from memory.embeddings import embed_texts, get_embedder

    vectors = embed_texts(["I drank coffee yesterday"])   # float32 (1, dim), unit rows

``get_embedder()`` is the process's embedder: the one named by
``FORGE_MEMORY_EMBEDDER`` (a dotted path to a zero-argument factory) when set;
else an OpenAI-compatible ``/v1/embeddings`` when ``FORGE_EMBEDDING_MODEL`` is
set (same ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` as the model); else the
offline model whose weights ship in a PyPI wheel, so ``make run`` embeds with
no download at run time.

Every way an embedder can fail is an ``EmbeddingError``; callers (the index
consumer, search) catch it and fall back to full text, never failing a
rolling or a request.
"""

from __future__ import annotations

from .base import (
    BadEmbedding,
    Embedder,
    EmbeddingError,
    EmbeddingMisconfigured,
    EmbeddingUnavailable,
    blank_vector,
    check_vectors,
)
from .registry import embed_texts, get_embedder, reset_embedder

__all__ = [
    "BadEmbedding",
    "Embedder",
    "EmbeddingError",
    "EmbeddingMisconfigured",
    "EmbeddingUnavailable",
    "blank_vector",
    "check_vectors",
    "embed_texts",
    "get_embedder",
    "reset_embedder",
]
