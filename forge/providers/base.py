"""What a provider is: one model call in, one normalized event stream out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from .events import StreamEvent


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the input object

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True)
class ModelRequest:
    """Everything one model call is given, in the OpenAI Chat Completions message shape.

    ``messages`` are dicts like ``{"role": "user", "content": "..."}``,
    ``{"role": "assistant", "content": "...", "tool_calls": [{"id", "type": "function",
    "function": {"name", "arguments"}}]}`` and ``{"role": "tool", "tool_call_id",
    "content"}``; ``system`` is sent first, as system messages. It is what
    ``forge.context.derive_messages`` produces, and what ``/context/`` shows.
    """

    model: str  # the model name within its provider ("gpt-4o-mini", "echo")
    system: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[ToolSpec] = field(default_factory=list)
    temperature: float | None = None
    max_output_tokens: int | None = None
    # ``len(json.dumps(messages, ensure_ascii=False))`` when the builder knows it (the
    # context cache keeps each message's size): the compaction's estimate then encodes
    # only the rest of the request. Not part of the request (never sent, not compared).
    messages_chars: int | None = field(default=None, compare=False, repr=False)
    # and the same for the rest: ``len(json.dumps({**self.as_dict(), "messages": []}))``
    # (model, system, tools, settings: the same every step until a context block changes).
    rest_chars: int | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system": list(self.system),
            "messages": list(self.messages),
            "tools": [tool.as_dict() for tool in self.tools],
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
        }


class Provider(Protocol):
    """A model provider. ``stream`` makes one model call (one step).

    It yields ``StartStep`` first and ends with ``FinishStep`` or ``Error``;
    it never raises for a failure of the model or the network (those become an
    ``Error`` event, after any retries, each announced by a ``Retry`` event).
    It stops promptly when the task running it is cancelled (abort).
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]: ...
