"""Deterministic embedders for the tests (``FORGE_MEMORY_EMBEDDER``), so the suite never
depends on the offline model.

``hashed`` is a real implementation of the interface: a text's vector is the signed
sum of its hashed features (character trigrams of each folded word, with its
boundaries), so texts sharing word pieces are near, and texts sharing none are at
about 0. It also knows a few synonyms (``CONCEPTS``): every word of one concept
adds the same feature, so "espresso" is near "latte" though they share no letter,
which is how the tests make a match by meaning alone.

The failing variants answer the interface wrongly, each in one way.
"""

from __future__ import annotations

import hashlib
import re
import threading
from typing import Any

import numpy as np

from memory.embeddings import Embedder, EmbeddingUnavailable
from memory.text import fold

DIM = 512

CONCEPTS = {
    "coffee": ("espresso", "latte", "cappuccino", "barista"),
    "sport": ("marathon", "jogging", "sprint"),
}
_CONCEPT_OF = {word: name for name, words in CONCEPTS.items() for word in words}
_WORD = re.compile(r"[^\W_]+")


def _feature(key: str) -> tuple[int, float]:
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    number = int.from_bytes(digest, "little")
    return number % DIM, 1.0 if (number >> 32) & 1 else -1.0


def vector(text: str) -> np.ndarray:
    out = np.zeros(DIM, dtype=np.float32)
    for word in _WORD.findall(fold(text)):
        concept = _CONCEPT_OF.get(word)
        if concept is not None:
            at, sign = _feature(f"concept:{concept}")
            out[at] += 3.0 * sign
        padded = f"#{word}#"
        for i in range(max(1, len(padded) - 2)):
            at, sign = _feature(padded[i : i + 3])
            out[at] += sign
    if not out.any():
        out[_feature("#empty#")[0]] = 1.0  # never a zero vector
    return out


class Hashed(Embedder):
    name = "test/hashed-trigrams@512"
    dim = DIM
    batch_size = 16

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0
        self._lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> Any:
        with self._lock:
            self.calls += 1
            self.texts += len(texts)
        return np.stack([vector(t) for t in texts])


class Renamed(Hashed):
    """The same vectors under another model's name: a change of embedding model."""

    name = "test/hashed-trigrams-v2@512"


class Down(Hashed):
    """An embedder whose server is down."""

    def embed_batch(self, texts: list[str]) -> Any:
        raise EmbeddingUnavailable("connection refused (the test's embedder is down)")


class Crashing(Hashed):
    """An embedder that raises something that is not an EmbeddingError."""

    def embed_batch(self, texts: list[str]) -> Any:
        raise RuntimeError("boom")


class Flaky(Hashed):
    """Answers its first call, then is down (a run stopped halfway)."""

    name = Renamed.name

    def embed_batch(self, texts: list[str]) -> Any:
        if self.calls >= 1:
            raise EmbeddingUnavailable("the test's embedder went down")
        return super().embed_batch(texts)


class WrongDimension(Hashed):
    def embed_batch(self, texts: list[str]) -> Any:
        return np.ones((len(texts), DIM // 2), dtype=np.float32)


class NotANumber(Hashed):
    def embed_batch(self, texts: list[str]) -> Any:
        out = np.stack([vector(t) for t in texts])
        out[:, 0] = np.nan
        return out


def hashed() -> Embedder:
    return Hashed()


def renamed() -> Embedder:
    return Renamed()


def down() -> Embedder:
    return Down()


def crashing() -> Embedder:
    return Crashing()


def flaky() -> Embedder:
    return Flaky()


def wrong_dimension() -> Embedder:
    return WrongDimension()


def not_a_number() -> Embedder:
    return NotANumber()


def broken_factory() -> Embedder:
    raise RuntimeError("the factory itself failed")
