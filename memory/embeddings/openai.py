"""An OpenAI-compatible ``/v1/embeddings`` embedder, with the official ``openai`` SDK.

Chosen when ``FORGE_EMBEDDING_MODEL`` is ``openai/<model>`` (the model name may hold
slashes: ``openai/BAAI/bge-m3``). It talks to the server the chat model uses,
``OPENAI_BASE_URL`` with ``OPENAI_API_KEY`` (none needed by local servers: vLLM,
Ollama, llama.cpp, LM Studio, text-embeddings-inference …).

What is sent: ``{"model", "input": [texts], "encoding_format": "float"}`` plus
``"dimensions"`` when ``FORGE_EMBEDDING_DIMENSIONS`` is set (OpenAI's
``text-embedding-3`` models shorten their vectors to it; other servers may refuse
it). At most ``FORGE_EMBEDDING_BATCH`` texts per request. Blank texts (empty or
white space only, which OpenAI refuses) are not sent: they get
:func:`~memory.embeddings.base.blank_vector`.

Search must never hang on it: every request has ``FORGE_EMBEDDING_TIMEOUT`` seconds
(httpx's connect, write and read timeouts, each; a read timeout bounds each wait
for bytes), and its body is read as it comes and cut once the request has taken
that long in all (a server that sends a byte at a time, each within the read
timeout, held a search for as long as its body lasted; QA), and no retry. Every
failure is an ``EmbeddingError``:

=====================================================  ========================
connection refused or dropped, timeout                 ``EmbeddingUnavailable``
HTTP 408, 409, 429, 5xx                                ``EmbeddingUnavailable``
HTTP 401, 403, 404 (bad key, unknown model or route)   ``EmbeddingMisconfigured``
another HTTP 4xx (e.g. a text over the model's limit)  ``EmbeddingError``
a body that is not JSON, not OpenAI's shape, a count   ``BadEmbedding``
or a dimension other than expected, NaN, null
=====================================================  ========================

The vector space's ``name`` is ``openai/<model>@<dimensions>``. Without
``FORGE_EMBEDDING_DIMENSIONS`` the dimensions are the model's own, learned from its
first answer (reading ``name`` or ``dim`` before any answer asks the server once,
with one short text, and may raise ``EmbeddingUnavailable``). From then on an
answer of another width is a ``BadEmbedding``, never a vector stored under a
name that does not describe it.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import openai
import pydantic
from openai.types import CreateEmbeddingResponse

from .base import (
    BadEmbedding,
    Embedder,
    EmbeddingError,
    EmbeddingMisconfigured,
    EmbeddingUnavailable,
    blank_vector,
)

__all__ = ["OpenAIEmbedder"]

PREFIX = "openai/"
# Sent when no key is configured: local servers need none, but the SDK insists on one.
NO_API_KEY = "not-needed"
PROBE_TEXT = "dimension probe"
UNAVAILABLE_STATUSES = frozenset({408, 409, 429})
MISCONFIGURED_STATUSES = frozenset({401, 403, 404})


class OpenAIEmbedder(Embedder):
    """Texts to vectors through ``POST {base_url}/embeddings``; see the module docstring."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 5.0,
        dimensions: int | None = None,
        batch_size: int = 64,
    ) -> None:
        """``base_url`` None: the SDK's default (``$OPENAI_BASE_URL`` or api.openai.com)."""
        if not model or model != model.strip():
            raise EmbeddingMisconfigured(f"the embedding model name {model!r} is not usable")
        if dimensions is not None and dimensions < 1:
            raise EmbeddingMisconfigured(
                f"FORGE_EMBEDDING_DIMENSIONS must be a positive integer, got {dimensions}"
            )
        if not timeout > 0:
            raise EmbeddingMisconfigured(f"FORGE_EMBEDDING_TIMEOUT must be > 0, got {timeout}")
        if batch_size < 1:
            raise EmbeddingMisconfigured(f"FORGE_EMBEDDING_BATCH must be >= 1, got {batch_size}")
        self.model = model
        self.dimensions = dimensions
        self.timeout = float(timeout)
        self.batch_size = int(batch_size)
        self._dim: int | None = dimensions
        self._lock = threading.Lock()
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or NO_API_KEY,
            timeout=self.timeout,
            max_retries=0,  # a search waits for one attempt at most
        )

    @classmethod
    def from_settings(cls) -> OpenAIEmbedder:
        """Configured by ``FORGE_EMBEDDING_{MODEL,TIMEOUT,DIMENSIONS,BATCH}``,
        ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (read now, not at import)."""
        from django.conf import settings

        spec = str(getattr(settings, "FORGE_EMBEDDING_MODEL", "") or "")
        model = spec[len(PREFIX) :] if spec.startswith(PREFIX) else ""
        if not model:
            raise EmbeddingMisconfigured(
                f"FORGE_EMBEDDING_MODEL={spec!r}: expected 'openai/<model>' "
                "(unset it for the offline model)"
            )
        dimensions = int(getattr(settings, "FORGE_EMBEDDING_DIMENSIONS", 0) or 0)
        return cls(
            model,
            base_url=getattr(settings, "OPENAI_BASE_URL", None) or None,
            api_key=getattr(settings, "OPENAI_API_KEY", "") or NO_API_KEY,
            timeout=float(getattr(settings, "FORGE_EMBEDDING_TIMEOUT", 5.0)),
            dimensions=dimensions or None,
            batch_size=int(getattr(settings, "FORGE_EMBEDDING_BATCH", 64)),
        )

    def __repr__(self) -> str:
        return f"<OpenAIEmbedder {self.model!r} dim={self._dim} at {self.client.base_url}>"

    # Properties where the interface has plain attributes: both are known only once the
    # model has answered (unless FORGE_EMBEDDING_DIMENSIONS is set), and never assigned.
    @property
    def dim(self) -> int:  # type: ignore[override]
        """The configured dimensions, else the width of the model's first answer."""
        if self._dim is None:
            self.embed_batch([PROBE_TEXT])
        assert self._dim is not None  # set by the answer, or embed_batch raised
        return self._dim

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"{PREFIX}{self.model}@{self.dim}"

    def close(self) -> None:
        """Close the HTTP client's pooled connections."""
        self.client.close()

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        sent = [i for i, text in enumerate(texts) if text.strip()]
        vectors = self._request([texts[i] for i in sent]) if sent else None
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if len(sent) < len(texts):
            out[:] = blank_vector(self.dim)
        if vectors is not None:
            out[sent] = vectors
        return out

    def _request(self, texts: list[str]) -> np.ndarray:
        """One request: a float32 ``(len(texts), dim)`` array, or an ``EmbeddingError``."""
        params: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions is not None:
            params["dimensions"] = self.dimensions
        where = f"the embedding server {self.client.base_url}"
        deadline = time.monotonic() + self.timeout
        try:
            with self.client.embeddings.with_streaming_response.create(**params) as streamed:
                body = bytearray()
                for chunk in streamed.iter_bytes():
                    body += chunk
                    if time.monotonic() > deadline:
                        raise openai.APITimeoutError(request=streamed.http_request)
            response = CreateEmbeddingResponse.model_validate(json.loads(body))
        except openai.APITimeoutError:
            raise EmbeddingUnavailable(
                f"{where} did not answer within {self.timeout:g} s"
            ) from None
        except openai.APIConnectionError as exc:
            raise EmbeddingUnavailable(f"{where} cannot be reached: {_cause(exc)}") from None
        except openai.APIStatusError as exc:
            raise _status_error(exc, where, self.model) from None
        except openai.APIResponseValidationError as exc:
            raise BadEmbedding(f"{where} answered with a malformed body: {exc}") from None
        except (openai.OpenAIError, pydantic.ValidationError, ValueError, TypeError) as exc:
            # The SDK raises a bare ValueError on a body that is not JSON.
            raise BadEmbedding(
                f"{where} answered with no usable body: {type(exc).__name__}: {exc}"
            ) from None
        return self._vectors(response, count=len(texts), where=where)

    def _vectors(self, response: Any, *, count: int, where: str) -> np.ndarray:
        data = getattr(response, "data", None)
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else type(data).__name__
            raise BadEmbedding(f"{where} answered {got} embeddings for {count} texts")
        try:
            items = sorted(data, key=lambda item: int(item.index))
            if [int(item.index) for item in items] != list(range(count)):
                raise ValueError("the indices are not 0..n-1")
            vectors = np.asarray([item.embedding for item in items], dtype=np.float32)
        except (AttributeError, TypeError, ValueError) as exc:
            raise BadEmbedding(f"{where} answered embeddings of the wrong shape: {exc}") from None
        if vectors.ndim != 2 or vectors.shape[1] < 1:
            raise BadEmbedding(f"{where} answered embeddings of shape {vectors.shape}")
        width = int(vectors.shape[1])
        with self._lock:
            if self._dim is None:
                self._dim = width
            expected = self._dim
        if width != expected:
            origin = "FORGE_EMBEDDING_DIMENSIONS" if self.dimensions else "its first answer"
            raise BadEmbedding(
                f"{where} answered {width} dimensions, expected {expected} ({origin})"
            )
        return vectors


def _cause(exc: BaseException) -> str:
    """The innermost cause's message (``Connection refused`` rather than the SDK's
    generic ``Connection error.``)."""
    for _ in range(10):  # a chain is short; never loop on a cycle
        inner = exc.__cause__ or exc.__context__
        if inner is None:
            break
        exc = inner
    return f"{type(exc).__name__}: {exc}"


def _status_error(exc: openai.APIStatusError, where: str, model: str) -> EmbeddingError:
    status = exc.status_code
    body = exc.body
    detail = body.get("message") if isinstance(body, dict) else None
    message = f"{where} answered HTTP {status} for model {model!r}: {detail or exc.message}"
    if status in MISCONFIGURED_STATUSES:
        return EmbeddingMisconfigured(message)
    if status in UNAVAILABLE_STATUSES or status >= 500:
        return EmbeddingUnavailable(message)
    return EmbeddingError(message)
