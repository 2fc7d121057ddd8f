"""The embedder interface and its errors.

An ``Embedder`` turns texts into vectors. It has a ``name`` that identifies the
vector space (model and dimensions: vectors of two names are never compared)
and a ``dim``. :func:`check_vectors` is the one check every answer passes
before it is stored or compared: the right shape, finite numbers, no zero
vector; rows come back L2-normalized (so a dot product is the cosine).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exceptions import MemoryStoreError


class EmbeddingError(MemoryStoreError):
    """The embedder gave no usable vectors; search falls back to full text."""

    code = "embedding_failed"
    status = 502


class EmbeddingUnavailable(EmbeddingError):
    """The embedder is down, refused, or did not answer in time."""

    code = "embedding_unavailable"
    status = 503


class BadEmbedding(EmbeddingError):
    """The embedder answered with vectors of the wrong shape, NaN or infinity, or zeros."""

    code = "bad_embedding"


class EmbeddingMisconfigured(EmbeddingError):
    """``FORGE_MEMORY_EMBEDDER`` / ``FORGE_EMBEDDING_MODEL`` name nothing usable."""

    code = "embedding_misconfigured"
    status = 500


class Embedder(ABC):
    """Texts to vectors. Subclasses set ``name`` and ``dim`` and implement ``embed_batch``.

    ``embed_batch`` may return a numpy array or a list of lists, and may raise
    anything: :func:`memory.embeddings.embed_texts` batches the calls, turns
    failures into ``EmbeddingError`` and checks every answer.
    """

    name: str  # e.g. "wordllama/l2_supercat_256" or "openai/text-embedding-3-small@1536"
    dim: int
    batch_size: int = 64

    @abstractmethod
    def embed_batch(self, texts: list[str]) -> Any:
        """Vectors for at most ``batch_size`` texts, in order."""


def check_vectors(raw: Any, *, count: int, dim: int) -> np.ndarray:
    """``raw`` as a float32 ``(count, dim)`` array of unit rows, or ``BadEmbedding``."""
    try:
        vectors = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise BadEmbedding(f"the embedder answered with no vectors: {exc}") from None
    if vectors.shape != (count, dim):
        raise BadEmbedding(
            f"the embedder answered with shape {vectors.shape}, expected {(count, dim)}"
        )
    if not np.all(np.isfinite(vectors)):
        raise BadEmbedding("the embedder answered with NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1)
    if count and not np.all(norms > 0):
        raise BadEmbedding("the embedder answered with a zero vector")
    return (vectors / norms[:, None]).astype(np.float32, copy=False)


def blank_vector(dim: int) -> np.ndarray:
    """The vector of a text with nothing to embed (empty or, for some embedders, blank).

    A fixed unit vector (every component ``1/sqrt(dim)``), the same for every such
    text, so that one empty message never fails the batch it is in. It carries no
    meaning: callers that can should skip empty texts rather than index them.
    """
    return np.full(dim, 1.0 / np.sqrt(dim), dtype=np.float32)


def batches(texts: Sequence[str], size: int) -> list[list[str]]:
    size = max(1, int(size))
    return [list(texts[i : i + size]) for i in range(0, len(texts), size)]
