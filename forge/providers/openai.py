"""The OpenAI provider: one streamed Chat Completions call per step, with the official SDK.

Works with OpenAI and with any OpenAI-compatible server (vLLM, Ollama, llama.cpp,
LM Studio, DeepSeek …): ``base_url`` points at the server's ``/v1`` root.

What is sent: the system prompts first (one ``system`` message each), then the
request's messages as given, the tools as ``function`` tools, ``temperature``
when set and ``max_completion_tokens`` when ``max_output_tokens`` is set (the
SDK accepts both that and the older ``max_tokens``; OpenAI deprecated
``max_tokens`` and its reasoning models refuse it, while current vLLM,
llama.cpp and Ollama accept ``max_completion_tokens``; a subclass can set
``max_tokens_param = "max_tokens"`` for an older server). ``stream_options``
asks for the usage chunk at the end.

How chunks become stream events (see :mod:`forge.providers.events`):
``reasoning_content`` (or ``reasoning``), an extension field of vLLM, DeepSeek and
llama.cpp, becomes a reasoning block; ``content`` (and ``refusal``) a text block;
``tool_calls`` fragments, keyed by ``index``, the input of tool calls, each
completed by a ``tool-call`` when the choice finishes (``arguments`` sent as a JSON
value instead of text is serialized; ``tool_calls`` that is not a list of objects
is a malformed chunk). Blocks are numbered
within the step (``text-0``, ``reasoning-0``, ``text-1`` …).

Failures never raise out of :meth:`OpenAIProvider.stream`: 429, 408, 5xx,
connection errors and a connection dropped before any content are retried under
a :class:`~forge.providers.retry.RetryPolicy` (each retry announced by a
``Retry`` event); so is a stream that ends with neither a ``finish_reason`` nor
``data: [DONE]`` (it ended early). Anything else (a 200 answer that holds no event
stream, such as a JSON body or a proxy's page, included), or running out of
attempts, ends the step with an ``Error`` event. Once content has reached the
caller a retry would repeat it, so a failure after that ends the step with an
``Error`` (open text and reasoning blocks are closed first; a tool call whose input
was still streaming is dropped).
``timeout`` bounds each wait: for the response's headers, and for every chunk of
the stream after them (SSE comments, such as a proxy's keep-alive ``: ping``, do
not count), so a stalled stream times out like a silent one.
Cancelling the task that consumes the stream propagates ``CancelledError`` and
closes the HTTP response.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import openai
from openai.types.chat import ChatCompletionChunk

from .base import ModelRequest
from .events import (
    Error,
    Retry,
    StartStep,
    StreamEvent,
)
from .openai_chunks import ChunkMapper, bound_usage
from .retry import RetryPolicy, is_retryable_status, parse_retry_after

__all__ = ["OpenAIProvider"]

logger = logging.getLogger(__name__)

# Seconds to wait, once the finish reason came, for the usage chunk (some proxies send it
# seconds later: cut at 2 s, the step was billed nothing; QA), then for each chunk after it.
USAGE_GRACE = 15.0
FINISHED_GRACE = 2.0

Sleep = Callable[[float], Awaitable[object]]
Clock = Callable[[], float]

# The API key sent when none is configured: local servers need none, but the SDK
# insists on one.
NO_API_KEY = "not-needed"


class OpenAIProvider:
    """A :class:`~forge.providers.base.Provider` for the Chat Completions API."""

    name = "openai"
    max_tokens_param: ClassVar[str] = "max_completion_tokens"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_attempts: int = 4,
        retry_window: float = 30.0,
        timeout: float = 120.0,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.time,
    ) -> None:
        """``base_url`` None: the SDK's default (``$OPENAI_BASE_URL`` or api.openai.com);
        ``api_key`` None: ``$OPENAI_API_KEY``, or a placeholder for servers that need
        none. ``sleep`` and ``clock`` are injectable for tests."""
        self.model = model
        self.policy = RetryPolicy(max_attempts=max(1, max_attempts), window=retry_window)
        self.timeout = timeout
        self._sleep = sleep
        self._clock = clock
        self.client = _Client(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or NO_API_KEY,
            max_retries=0,  # retries are ours (see stream), so they are visible as events
            timeout=timeout,
        )

    @classmethod
    def from_settings(
        cls, model: str, *, sleep: Sleep = asyncio.sleep, clock: Clock = time.time
    ) -> OpenAIProvider:
        """A provider configured by the Django settings ``OPENAI_BASE_URL``,
        ``OPENAI_API_KEY`` and ``FORGE_PROVIDER_{MAX_ATTEMPTS,RETRY_WINDOW,TIMEOUT}``
        (read now, not at import)."""
        from django.conf import settings

        return cls(
            model,
            base_url=getattr(settings, "OPENAI_BASE_URL", None) or None,
            api_key=getattr(settings, "OPENAI_API_KEY", "") or NO_API_KEY,
            max_attempts=int(getattr(settings, "FORGE_PROVIDER_MAX_ATTEMPTS", 4)),
            retry_window=float(getattr(settings, "FORGE_PROVIDER_RETRY_WINDOW", 30.0)),
            timeout=float(getattr(settings, "FORGE_PROVIDER_TIMEOUT", 120.0)),
            sleep=sleep,
            clock=clock,
        )

    async def aclose(self) -> None:
        """Close the HTTP client (its pooled connections)."""
        await self.client.close()

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": text} for text in request.system
        ]
        messages.extend(request.messages)
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = [{"type": "function", "function": t.as_dict()} for t in request.tools]
        if request.temperature is not None:
            params["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            params[self.max_tokens_param] = request.max_output_tokens
        return params

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """One model call (one step) as normalized events; see the module docstring."""
        yield StartStep()
        params = self.request_params(request)
        bounds = partial(bound_usage, params=params, max_output=request.max_output_tokens)
        started_at = self._clock()
        attempt = 1
        while True:
            mapper = ChunkMapper(bounds=bounds)
            try:
                async with aclosing(self._attempt(params, mapper)) as events:
                    async for event in events:
                        yield event
                return
            except Exception as exc:  # CancelledError is a BaseException: it propagates
                failure = _classify(exc, now=self._clock(), key=self.client.api_key)
                if failure.unexpected:
                    logger.exception("openai provider: unexpected failure")
            if mapper.finished:
                # The answer is complete; only the tail (usage, [DONE]) was lost.
                for event in mapper.end():
                    yield event
                return
            if mapper.content:
                # Retrying would repeat what the caller already has.
                for event in mapper.close_blocks():
                    yield event
                yield failure.error(suffix="after part of the reply was streamed")
                return
            if not failure.retryable:
                yield failure.error()
                return
            next_at = self.policy.next_attempt_at(
                attempt=attempt,
                started_at=started_at,
                now=self._clock(),
                retry_after=failure.retry_after,
            )
            if next_at is None:
                tries = "attempt" if attempt == 1 else "attempts"
                why = f"gave up after {attempt} {tries}"
                if failure.retry_after is not None and attempt < self.policy.max_attempts:
                    why += (
                        f"; the server asked to wait {failure.retry_after:.0f} s, "
                        "past the retry window"
                    )
                yield failure.error(suffix=why)
                return
            attempt += 1
            logger.warning(
                "openai provider: %s; attempt %d in %.2fs",
                failure.message,
                attempt,
                next_at - self._clock(),
            )
            yield Retry(attempt=attempt, next_at=next_at, message=failure.message)
            await self._sleep(max(0.0, next_at - self._clock()))

    async def _attempt(
        self, params: dict[str, Any], mapper: ChunkMapper
    ) -> AsyncGenerator[StreamEvent, None]:
        """One HTTP request: its events, ending with ``FinishStep``; failures raise.

        No chunk for ``timeout`` seconds is a timeout (``APITimeoutError``), as a silent
        stall is: httpx's read timeout alone does not bound a stream, since any bytes
        reset it, and a server or proxy that sends only SSE comments (``: ping``, which
        the SDK skips) kept a stalled step open for ever. The deadline covers only the
        wait for the next chunk, never the consumer's time between two (an
        ``asyncio.timeout`` around a ``yield`` would cancel the consumer's own work)."""
        response: openai.AsyncStream[ChatCompletionChunk]
        response = await self.client.chat.completions.create(**params)
        async with response:
            chunks = response.__aiter__()
            while True:
                # Once the finish reason is in, only the usage and [DONE] are to come:
                # a server that sends neither, nor ends the body, held the step (and the
                # session) for the whole timeout (QA). The body is still read to its end
                # when it comes: a connection left mid-body is not reused.
                wait = self.timeout
                if mapper.finished:  # the usage is awaited longer than [DONE] after it
                    grace = FINISHED_GRACE if mapper.usage_seen else USAGE_GRACE
                    wait = min(self.timeout, grace)
                deadline = asyncio.timeout(wait)
                try:
                    async with deadline:
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError as exc:
                    if not deadline.expired():
                        raise
                    if mapper.finished:  # the answer is whole; the server never ended the body
                        if not mapper.usage_seen:
                            logger.warning(
                                "openai provider: no usage within %.0f s of the finish "
                                "reason; the step is counted as reported so far",
                                wait,
                            )
                        break
                    raise openai.APITimeoutError(request=response.response.request) from exc
                except (ValueError, TypeError) as exc:  # bad JSON in an SSE data line
                    raise _MalformedChunk(str(exc)) from exc
                try:
                    events = mapper.feed(chunk)
                except (AttributeError, TypeError, ValueError, KeyError) as exc:
                    raise _MalformedChunk(f"{type(exc).__name__}: {exc}") from exc
                for event in events:
                    yield event
        if not mapper.finished and not _saw_done(response):
            raise _EndedEarly.of(response)
        for event in mapper.end():
            yield event


class _Client(openai.AsyncOpenAI):
    """The SDK's client, whose streams note whether the server sent ``data: [DONE]``.

    The SDK ends a stream alike at ``[DONE]`` and at a body that just stops (a server
    or proxy that closed early, a close-delimited body), and a reply cut short so was
    stored as finished, a compaction's summary too (QA). A stream that ends with
    neither a ``finish_reason`` nor ``[DONE]`` ended early (:class:`_EndedEarly`);
    ``[DONE]`` without a ``finish_reason`` is a lenient server's finished answer."""

    def _make_sse_decoder(self) -> Any:
        return _Watched(super()._make_sse_decoder())


class _Watched:
    """An SSE decoder that counts the events it decodes and notes ``[DONE]``."""

    def __init__(self, decoder: Any) -> None:
        self._decoder = decoder
        self.events = 0
        self.done = False

    def aiter_bytes(self, iterator: Any) -> AsyncGenerator[Any, None]:
        return self._watch(self._decoder.aiter_bytes(iterator))

    async def _watch(self, events: Any) -> AsyncGenerator[Any, None]:
        async for sse in events:
            self.events += 1
            if sse.data.startswith("[DONE]"):
                self.done = True
            yield sse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decoder, name)


def _saw_done(response: Any) -> bool:
    watched = getattr(response, "_decoder", None)
    return isinstance(watched, _Watched) and watched.done


# --- failures ---------------------------------------------------------------------


class _MalformedChunk(Exception):
    """A chunk that is not JSON, or not a chat.completion.chunk."""


class _EndedEarly(Exception):
    """The response ended before the answer did: neither a ``finish_reason`` nor
    ``[DONE]``. ``retryable``: it was a stream that stopped (as a dropped connection
    is); a 200 answer with no event at all (a JSON body, a proxy's HTML page) would
    come back the same."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable

    @classmethod
    def of(cls, response: Any) -> _EndedEarly:
        watched = getattr(response, "_decoder", None)
        if isinstance(watched, _Watched) and watched.events == 0:
            kind = response.response.headers.get("content-type") or "none"
            return cls(
                f"the model server did not answer with an event stream (content-type: "
                f"{kind[:100]})",
                retryable=False,
            )
        return cls(
            "the model's stream ended before the answer did (no finish_reason, no [DONE])",
            retryable=True,
        )


@dataclass(frozen=True)
class _Failure:
    message: str
    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    name: str = "APIError"
    unexpected: bool = False

    def error(self, *, suffix: str = "") -> Error:
        message = f"{self.message} ({suffix})" if suffix else self.message
        return Error(name=self.name, message=message, retryable=self.retryable, status=self.status)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP libraries' transport errors (the SDK wraps them, but not always)."""
    found: list[type[BaseException]] = []
    for module_name in ("httpx2", "httpx"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        error = getattr(module, "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


def _detail(exc: openai.APIError, key: str = "") -> str:
    """The server's own message, when its error body has one, without what looks like a
    credential (:func:`redacted`): it is logged in the reply's error, which every member
    of the tenant reads."""
    body = exc.body
    if isinstance(body, dict):
        message = body.get("message")
        if isinstance(message, str) and message:
            # The error's code too: it may be all that names the failure (an overflow's
            # "context_length_exceeded" under "Input is too long …": QA).
            code = body.get("code")
            if isinstance(code, str) and code and code not in message:
                message = f"{message[:2000]} ({code[:100]})"
            return redacted(message[:2200], key)
    if isinstance(body, str) and body.strip():
        return redacted(body.strip()[:500], key)
    return redacted(exc.message, key)


_CREDENTIALS = re.compile(
    r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"  # an Authorization header's value
    r"|\bsk-[A-Za-z0-9_-]{6,}"  # OpenAI-style keys (OpenAI masks its own; proxies may not)
)


def redacted(text: str, key: str = "") -> str:
    """``text`` with the configured API key, and what looks like a credential, replaced
    by ``[redacted]``. A model server (a proxy, a self-hosted one) may echo the request's
    ``Authorization`` header in its error (QA)."""
    if key and len(key) >= 8 and key != NO_API_KEY:
        text = text.replace(key, "[redacted]")
    return _CREDENTIALS.sub(
        lambda m: f"{m.group(1)} [redacted]" if m.group(1) else "sk-[redacted]", text
    )


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause is not None else ""


def _classify(exc: Exception, *, now: float, key: str = "") -> _Failure:
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retryable = is_retryable_status(status)
        retry_after = parse_retry_after(exc.response.headers, now=now) if retryable else None
        return _Failure(
            message=f"HTTP {status} from the model server: {_detail(exc, key)}",
            retryable=retryable,
            status=status,
            retry_after=retry_after,
        )
    if isinstance(exc, openai.APITimeoutError):
        return _Failure(message="the model server timed out", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        cause = _cause(exc)
        return _Failure(
            message=f"connection to the model server failed{': ' + cause if cause else ''}",
            retryable=True,
        )
    if isinstance(exc, _EndedEarly):
        return _Failure(message=str(exc), retryable=exc.retryable, name="ProviderError")
    if isinstance(exc, _MalformedChunk):
        return _Failure(
            message=f"malformed chunk in the model's stream: {exc}",
            retryable=False,
            name="ProviderError",
        )
    if isinstance(exc, openai.APIError):  # e.g. an error object sent mid-stream
        return _Failure(
            message=f"the model server reported an error: {_detail(exc, key)}", retryable=False
        )
    if isinstance(exc, (*_transport_errors(), ConnectionError)):
        return _Failure(
            message=f"connection to the model server failed: {type(exc).__name__}: {exc}",
            retryable=True,
        )
    return _Failure(
        message=f"unexpected {type(exc).__name__}: {exc}",
        retryable=False,
        name="ProviderError",
        unexpected=True,
    )
