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

from dataclasses import asdict, dataclass, field
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
