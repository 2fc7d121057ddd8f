"""The normalized stream every provider produces (one model call = one step).

A step's stream is::

    start-step
    ( text-start  text-delta*  text-end
    | reasoning-start  reasoning-delta*  reasoning-end
    | tool-input-start  tool-input-delta*  tool-input-end  tool-call
    | retry )*
    ( finish-step | error )

``id`` names a text or reasoning block within the step; ``call_id`` a tool call.
``retry`` reports a retried request (shown to clients as ``session.status``).
``tool-call.input`` is the raw argument text the model produced; the Processor
parses and validates it, so malformed JSON becomes a tool error, not a crash.

Scripts (``offline/script``) use the same events as JSON objects:
``{"type": "text-delta", "id": "t1", "delta": "Hi"}`` (see :func:`event_from_dict`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Usage:
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0

    def as_tokens(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StartStep:
    type = "start-step"


@dataclass(frozen=True, slots=True)
class TextStart:
    id: str
    type = "text-start"


@dataclass(frozen=True, slots=True)
class TextDelta:
    id: str
    delta: str
    type = "text-delta"


@dataclass(frozen=True, slots=True)
class TextEnd:
    id: str
    type = "text-end"


@dataclass(frozen=True, slots=True)
class ReasoningStart:
    id: str
    type = "reasoning-start"


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    id: str
    delta: str
    type = "reasoning-delta"


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    id: str
    type = "reasoning-end"


@dataclass(frozen=True, slots=True)
class ToolInputStart:
    call_id: str
    tool: str
    type = "tool-input-start"


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    call_id: str
    delta: str
    type = "tool-input-delta"


@dataclass(frozen=True, slots=True)
class ToolInputEnd:
    call_id: str
    type = "tool-input-end"


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    tool: str
    input: str  # raw JSON text of the arguments, as the model produced it
    type = "tool-call"


@dataclass(frozen=True, slots=True)
class FinishStep:
    # "stop", "tool-calls", "length", "content-filter", "error", "other"
    finish_reason: str
    usage: Usage = field(default_factory=Usage)
    type = "finish-step"


@dataclass(frozen=True, slots=True)
class Retry:
    attempt: int  # the attempt about to be made (2 = first retry)
    next_at: float  # UNIX time of that attempt
    message: str  # why the previous attempt failed
    type = "retry"


@dataclass(frozen=True, slots=True)
class Error:
    name: str  # e.g. "APIError", "ProviderError"
    message: str
    retryable: bool = False
    status: int | None = None  # HTTP status, when there was one
    type = "error"

    @property
    def overflowed(self) -> bool:
        """The request did not fit the model's context window: a ``ContextOverflowError``,
        or a refusal that says so (OpenAI's ``context_length_exceeded``, "prompt is too
        long", ...) with no status or a 400 / 413. A retryable failure never is: a 429
        "too many tokens per minute" or a 503 naming a "context window cache" is a rate
        limit or an outage, which compacting the session would not cure (QA: such
        errors compacted the session and ran the retries twice)."""
        if self.name == OVERFLOW_ERROR:
            return True
        if self.retryable or self.status not in _OVERFLOW_STATUSES:
            return False
        return bool(_OVERFLOW.search(self.message or ""))


OVERFLOW_ERROR = "ContextOverflowError"
_OVERFLOW_STATUSES = frozenset({None, 400, 413})
_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|context length|"
    r"prompt is too long|too many tokens|reduce the length",
    re.IGNORECASE,
)


StreamEvent = (
    StartStep
    | TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolInputStart
    | ToolInputDelta
    | ToolInputEnd
    | ToolCall
    | FinishStep
    | Retry
    | Error
)

_BY_TYPE: dict[str, type] = {
    cls.type: cls
    for cls in (
        StartStep,
        TextStart,
        TextDelta,
        TextEnd,
        ReasoningStart,
        ReasoningDelta,
        ReasoningEnd,
        ToolInputStart,
        ToolInputDelta,
        ToolInputEnd,
        ToolCall,
        FinishStep,
        Retry,
        Error,
    )
}


NUL = "\x00"
REPLACEMENT = "\ufffd"  # what a model's NUL, or lone surrogate, becomes
# What the log cannot store: NUL, and the UTF-16 surrogates (U+D800-U+DFFF). A str
# holds a surrogate only alone: JSON decodes a pair of escapes to one character, so a
# surrogate left in a str is a half pair, which UTF-8 cannot encode.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> bool:
    """Whether ``text`` holds neither NUL nor a lone surrogate. Cheap on the hot path:
    ``isascii`` is O(1) in CPython, and for other text a UTF-8 encoding (which fails
    on a surrogate, the only thing it can fail on) was measured 3-7 times faster
    than a regex search (2 µs for 1,000 CJK characters; NUL's scan alone is 1 µs)."""
    if NUL in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def without_nul(text: str) -> str:
    """``text`` with every NUL character (U+0000), and every lone UTF-16 surrogate
    (U+D800-U+DFFF), replaced by U+FFFD.

    A model may emit NUL; the log stores none (``sessions.services`` refuses it,
    as PostgreSQL cannot store it). A server whose strings are UTF-16 (JavaScript)
    may emit half a surrogate pair (an emoji split between two chunks), which no
    UTF-8 text can hold: hashing the log's event, sending the frame and storing
    the row would each fail (``UnicodeEncodeError``), leaving the reply open.
    Refusing a model's output would fail the reply for one stray character, so
    what a model says is stored, and streamed, with U+FFFD in its place: the log
    holds exactly what clients were sent. (A pair split across two deltas of one
    block is joined before this, by ``openai_chunks``.)"""
    if storable(text):
        return text
    return _UNSTORABLE.sub(REPLACEMENT, text)


def without_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, NUL kept."""
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def event_without_nul(event: StreamEvent) -> StreamEvent:
    """``event`` with NUL and lone surrogates replaced (:func:`without_nul`) in each of
    its strings, except a tool call's ``input``: that is raw JSON, which the tool
    machinery parses and refuses with a tool error when it holds a NUL or an escaped
    lone surrogate (``forge.tools.prepare_call``); only its raw lone surrogates, which
    no text can carry, are replaced there."""
    if isinstance(event, TextDelta | ReasoningDelta):  # the hot path: one check
        delta = event.delta
        if delta.isascii() and NUL not in delta:  # most deltas: no call
            return event
        return event if storable(delta) else replace(event, delta=without_nul(delta))
    changes = {
        f.name: without_nul(value)
        for f in fields(event)
        if f.name != "input"
        and isinstance(value := getattr(event, f.name), str)
        and not storable(value)
    }
    if isinstance(event, ToolCall) and (raw := without_surrogates(event.input)) != event.input:
        changes["input"] = raw
    return replace(event, **changes) if changes else event  # type: ignore[arg-type]


class BadEvent(ValueError):
    """A scripted event that is not one of the stream's events."""


def event_from_dict(raw: Any) -> StreamEvent:
    """A stream event from its JSON form (``{"type": ..., **fields}``)."""
    if not isinstance(raw, dict) or raw.get("type") not in _BY_TYPE:
        raise BadEvent(f"not a stream event: {raw!r:.120}; types: {sorted(_BY_TYPE)}")
    fields = {k: v for k, v in raw.items() if k != "type"}
    cls = _BY_TYPE[raw["type"]]
    if cls is FinishStep and isinstance(fields.get("usage"), dict):
        fields["usage"] = Usage(**fields["usage"])
    if cls is ToolCall and not isinstance(fields.get("input", ""), str):
        import json

        fields["input"] = json.dumps(fields["input"])
    try:
        event: StreamEvent = cls(**fields)
    except TypeError as exc:
        raise BadEvent(f"bad {raw['type']} event: {exc}") from None
    return event
