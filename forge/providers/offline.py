"""Providers that need no network: ``offline/echo`` and ``offline/script``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from .base import ModelRequest
from .events import (
    BadEvent,
    Error,
    FinishStep,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StartStep,
    StreamEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputDelta,
    ToolInputEnd,
    ToolInputStart,
    Usage,
    event_from_dict,
)

TOOL_COMMAND = re.compile(r"/tool\s+([A-Za-z0-9_-]+)\s*(.*)", re.DOTALL)


def _text(content: Any) -> str:
    """The text of a message's content (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _count_tokens(request: ModelRequest) -> int:
    words = sum(len(s.split()) for s in request.system)
    for message in request.messages:
        words += len(_text(message.get("content")).split())
    return words


class EchoProvider:
    """Deterministic, offline: echoes the last user message word by word.

    * a short reasoning block comes first;
    * ``/tool NAME {json}`` in the prompt makes it call that tool with that input
      (``/tool list_files {}``), and the step after the tool result reports it;
    * ``delay`` seconds pass between words (``FORGE_ECHO_DELAY``; 0 in tests).
    """

    name = "offline"

    def __init__(self, model: str = "echo", *, delay: float = 0.0) -> None:
        self.model = model
        self.delay = delay

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield StartStep()
        last = request.messages[-1] if request.messages else {"role": "user", "content": ""}
        prompt_tokens = _count_tokens(request)
        if last.get("role") == "tool":
            results = [m for m in request.messages if m.get("role") == "tool"]
            summary = f"The tool returned: {_text(results[-1].get('content'))}"
            async for event in self._words("text-0", summary, TextStart, TextDelta, TextEnd):
                yield event
            yield FinishStep("stop", Usage(input=prompt_tokens, output=len(summary.split())))
            return
        prompt = _text(last.get("content"))
        command = TOOL_COMMAND.search(prompt)
        thought = (
            f"The user asks me to call {command.group(1)}."
            if command
            else f"The user wrote {len(prompt.split())} words; I will echo them."
        )
        async for event in self._words(
            "reasoning-0", thought, ReasoningStart, ReasoningDelta, ReasoningEnd
        ):
            yield event
        reasoning_tokens = len(thought.split())
        if command:
            seed = f"{len(request.messages)}:{prompt}".encode()
            call_id = "call_" + hashlib.sha256(seed).hexdigest()[:16]
            arguments = command.group(2).strip() or "{}"
            yield ToolInputStart(call_id=call_id, tool=command.group(1))
            yield ToolInputDelta(call_id=call_id, delta=arguments)
            yield ToolInputEnd(call_id=call_id)
            yield ToolCall(call_id=call_id, tool=command.group(1), input=arguments)
            yield FinishStep(
                "tool-calls",
                Usage(input=prompt_tokens, output=reasoning_tokens + 1, reasoning=reasoning_tokens),
            )
            return
        async for event in self._words("text-0", prompt, TextStart, TextDelta, TextEnd):
            yield event
        yield FinishStep(
            "stop",
            Usage(
                input=prompt_tokens,
                output=len(prompt.split()) + reasoning_tokens,
                reasoning=reasoning_tokens,
            ),
        )

    async def _words(
        self,
        block: str,
        text: str,
        start: Callable[[str], StreamEvent],
        delta: Callable[[str, str], StreamEvent],
        end: Callable[[str], StreamEvent],
    ) -> AsyncIterator[StreamEvent]:
        yield start(block)
        for n, word in enumerate(text.split(" ")):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield delta(block, word if n == 0 else " " + word)
        yield end(block)


class ScriptProvider:
    """Replays scripted replies: a JSON file holding a list of replies, each a list
    of stream events (``{"type": "text-delta", "id": "t", "delta": "Hi"}``).

    The reply for a call is the one at the index of the number of assistant
    messages already in the request (one per step), so a session replays the
    same way after a restart. ``start-step`` is added when a reply lacks it and
    ``finish-step`` ("stop") when it ends without one. For tests, a pseudo-event
    ``{"type": "sleep", "seconds": s}`` pauses the stream.
    """

    name = "offline"

    def __init__(
        self,
        model: str = "script",
        *,
        path: str | Path | None = None,
        replies: list[list[dict[str, Any]]] | None = None,
    ) -> None:
        self.model = model
        self.path = Path(path) if path else None
        self.replies = replies

    def _load(self) -> list[list[dict[str, Any]]]:
        if self.replies is not None:
            return self.replies
        if self.path is None:
            raise ValueError("offline/script needs FORGE_SCRIPT (the path of a JSON script)")
        try:
            replies = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read the script {self.path}: {exc}") from exc
        if not isinstance(replies, list) or not all(isinstance(r, list) for r in replies):
            raise ValueError("a script is a JSON list of replies, each a list of events")
        return replies

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        try:
            replies = self._load()
        except ValueError as exc:
            yield StartStep()
            yield Error(name="ProviderError", message=str(exc))
            return
        index = sum(1 for m in request.messages if m.get("role") == "assistant")
        if index >= len(replies):
            yield StartStep()
            yield Error(
                name="ProviderError",
                message=f"the script has {len(replies)} replies; reply {index + 1} was asked for",
            )
            return
        started = finished = False
        for raw in replies[index]:
            if isinstance(raw, dict) and raw.get("type") == "sleep":
                await asyncio.sleep(float(raw.get("seconds", 0)))
                continue
            try:
                event = event_from_dict(raw)
            except BadEvent as exc:
                if not started:
                    yield StartStep()
                yield Error(name="ProviderError", message=f"bad script event: {exc}")
                return
            if not started and not isinstance(event, StartStep):
                yield StartStep()
            started = True
            yield event
            if isinstance(event, FinishStep | Error):
                finished = True
                break
        if not started:
            yield StartStep()
        if not finished:
            yield FinishStep("stop", Usage())
