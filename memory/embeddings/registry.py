"""The process's embedder, chosen by settings, and :func:`embed_texts`."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
from django.conf import settings
from django.utils.module_loading import import_string

from .base import Embedder, EmbeddingError, EmbeddingMisconfigured, batches, check_vectors

_lock = threading.Lock()
_embedder: Embedder | None = None


def _build() -> Embedder:
    path = getattr(settings, "FORGE_MEMORY_EMBEDDER", "") or ""
    if path:
        try:
            factory: Callable[[], Embedder] = import_string(path)
        except ImportError as exc:
            raise EmbeddingMisconfigured(
                f"FORGE_MEMORY_EMBEDDER={path!r} cannot be imported: {exc}"
            ) from None
        try:
            embedder = factory()
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingMisconfigured(
                f"FORGE_MEMORY_EMBEDDER={path!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    elif getattr(settings, "FORGE_EMBEDDING_MODEL", ""):
        from .openai import OpenAIEmbedder

        embedder = OpenAIEmbedder.from_settings()
    else:
        from .offline import OfflineEmbedder

        embedder = OfflineEmbedder.shared()
    if not isinstance(embedder, Embedder):
        raise EmbeddingMisconfigured(f"{embedder!r} is not an Embedder")
    return embedder


def get_embedder() -> Embedder:
    """The embedder settings name, built once per process (``reset_embedder`` forgets it)."""
    global _embedder
    with _lock:
        if _embedder is None:
            _embedder = _build()
        return _embedder


def reset_embedder() -> None:
    """Forget the process's embedder (settings changed: tests, ``reindex_memory``)."""
    global _embedder
    with _lock:
        _embedder = None


def embed_texts(texts: Sequence[str], *, embedder: Embedder | None = None) -> np.ndarray:
    """float32 ``(len(texts), dim)`` unit rows, in batches of ``embedder.batch_size``.

    Raises ``EmbeddingError`` (and nothing else) when any batch fails or answers badly.
    """
    embedder = embedder or get_embedder()
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    out: list[np.ndarray] = []
    for batch in batches(texts, embedder.batch_size):
        try:
            raw = embedder.embed_batch(batch)
        except EmbeddingError:
            raise
        except Exception as exc:
            raise EmbeddingError(
                f"the embedder {type(embedder).__name__} failed: {type(exc).__name__}: {exc}"
            ) from exc
        out.append(check_vectors(raw, count=len(batch), dim=embedder.dim))
    return np.concatenate(out)
