"""The offline embedder: WordLlama ``l2_supercat`` at 256 dimensions, from its PyPI wheel.

The ``wordllama`` wheel carries the model itself: ``wordllama/weights/
l2_supercat_256.safetensors`` (a 32,000 x 256 float16 table, one row per token
of the Llama 2 tokenizer) and ``wordllama/tokenizers/l2_supercat_tokenizer_config.json``.
A text's vector is the mean of its tokens' rows (what ``WordLlamaInference.embed``
computes), L2-normalized by :func:`~memory.embeddings.base.check_vectors`.

Why not ``WordLlama.load()``: its loader looks for the tokenizer under
``wordllama/tokenizer/`` (singular) while the wheel ships ``wordllama/tokenizers/``,
so it falls through to ``~/.cache/wordllama`` and then *downloads* the file from
the Hugging Face hub with ``requests``; importing the ``wordllama`` package also
calls ``logging.basicConfig``. This module never imports ``wordllama``: it finds
the package's directory with :func:`importlib.util.find_spec` (which does not run
the package) and reads the two files with ``safetensors`` and ``tokenizers``,
so loading never touches the network, whatever the environment or cache.

Text with no tokens (the empty string) embeds as a fixed unit vector
(:func:`~memory.embeddings.base.blank_vector`), so one empty message never fails
a batch; callers that can should not index empty texts at all.

Cost (2-core development machine, shared): loading ~0.1-0.3 s, once per process;
a query ~0.06 ms; ~15,000-20,000 texts of ~100 characters per second in batches
(``embed`` below: about 60 % of the time of one ``mean`` per text).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np

from .base import Embedder, EmbeddingMisconfigured, blank_vector

__all__ = ["OfflineEmbedder"]

PACKAGE = "wordllama"
CONFIG = "l2_supercat"
DIM = 256
WEIGHTS = f"weights/{CONFIG}_{DIM}.safetensors"
TOKENIZER = f"tokenizers/{CONFIG}_tokenizer_config.json"
TENSOR = "embedding.weight"


def package_dir() -> Path:
    """The installed ``wordllama`` package's directory, found without importing it."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise EmbeddingMisconfigured(
            f"the offline embedder needs the {PACKAGE!r} package (pip install wordllama)"
        )
    return Path(locations[0])


class _Model:
    """The loaded table (float32, vocabulary x DIM) and tokenizer."""

    def __init__(self, root: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        weights, tokenizer = root / WEIGHTS, root / TOKENIZER
        for path in (weights, tokenizer):
            if not path.is_file():
                raise EmbeddingMisconfigured(
                    f"the {PACKAGE!r} package has no {path.relative_to(root)}: "
                    "the offline embedder needs wordllama 0.4 (the wheel ships the model)"
                )
        try:
            table = load_file(str(weights))[TENSOR]
            self.tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:
            raise EmbeddingMisconfigured(
                f"the offline model in {root} cannot be read: {type(exc).__name__}: {exc}"
            ) from exc
        if table.ndim != 2 or table.shape[1] != DIM:
            raise EmbeddingMisconfigured(
                f"{WEIGHTS} holds a table of shape {table.shape}, expected (vocabulary, {DIM})"
            )
        if self.tokenizer.get_vocab_size() > table.shape[0]:
            # Checked once here so that :meth:`embed` can index the table with the
            # tokenizer's ids as they come (no per-text bounds clipping).
            raise EmbeddingMisconfigured(
                f"the tokenizer's {self.tokenizer.get_vocab_size()} ids do not fit the "
                f"{table.shape[0]} rows of {WEIGHTS}"
            )
        # float32: gathering and summing rows is faster than float16, and 32 MB is cheap.
        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.blank = blank_vector(DIM)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Mean token vector of each text (unnormalized); ``blank`` for a text with no token.

        One text at a time: ``encode_batch`` spreads over a thread pool that contends
        with the server on a small machine. Per text, one ``take`` of its rows and one
        ``sum`` into the output row, then one division for the whole batch: 1.2 s for
        20,000 texts of ~100 characters where ``table[np.asarray(ids)].mean(axis=0)``
        per text took 2.0 s (the numpy calls, not the arithmetic, dominate for texts
        of ~20 tokens).
        """
        out = np.empty((len(texts), DIM), dtype=np.float32)
        counts = np.empty((len(texts), 1), dtype=np.float32)
        encode, take = self.tokenizer.encode, self.table.take
        for row, text in enumerate(texts):
            ids = encode(text, add_special_tokens=False).ids
            if ids:
                take(ids, axis=0).sum(axis=0, out=out[row])
                counts[row] = len(ids)
            else:
                out[row] = self.blank
                counts[row] = 1.0
        out /= counts
        return out


class OfflineEmbedder(Embedder):
    """WordLlama ``l2_supercat``, 256 dimensions, with no download at run time.

    ``shared()`` is the process's instance; the model is loaded on the first
    ``embed_batch`` (or ``load()``), once, under a lock. Embedding is pure
    computation over the loaded table and safe from several threads at once.
    """

    name = f"{PACKAGE}/{CONFIG}_{DIM}"
    dim = DIM
    batch_size = 256

    _shared: ClassVar[OfflineEmbedder | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._model: _Model | None = None
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> OfflineEmbedder:
        """The process's one instance (created on first use; the model loads later)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def load(self) -> None:
        """Load the model now (idempotent): the first search then pays nothing extra.

        Raises ``EmbeddingMisconfigured`` when the package or its files are missing;
        a later call tries again.
        """
        self._loaded()

    def _loaded(self) -> _Model:
        model = self._model
        if model is not None:
            return model
        with self._lock:
            if self._model is None:
                self._model = _Model(package_dir())
            return self._model

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        return self._loaded().embed(list(texts))
