"""OpenAI Chat Completions chunks, as Forge's stream events (see ``forge.providers.openai``
for which fields map to which blocks)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from openai import BaseModel
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from sessions.shapes import MAX_TOKENS

from .events import (
    FinishStep,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    StreamEvent,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCall,
    ToolInputDelta,
    ToolInputEnd,
    ToolInputStart,
    Usage,
)

logger = logging.getLogger("forge.providers.openai")

# OpenAI finish reasons, as Forge's.
FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}


@dataclass
class _ToolInput:
    index: int
    call_id: str
    tool: str = ""
    arguments: str = ""
    started: bool = False  # tool-input-start sent (waits for the tool's name)
    done: bool = False  # tool-input-end and tool-call sent
    given_id: bool = True  # the id came from the server


@dataclass
class ChunkMapper:
    """Turns the chunks of one streamed response into stream events. ``bounds``: what
    the usage reported is kept within (:func:`bound_usage`), when the caller knows the
    request."""

    content: bool = False  # a content event (text, reasoning, tool input) was produced
    finish_reason: str | None = None
    finished: bool = False
    usage: Usage = field(default_factory=Usage)
    bounds: Callable[[Usage], Usage] | None = None
    usage_seen: bool = False  # a chunk carried the usage
    _text: str | None = None  # id of the open text block
    _reasoning: str | None = None  # id of the open reasoning block
    # A high surrogate that ended the open block's last delta, held for the next one
    # (see _join_surrogates).
    _text_high: str = ""
    _reasoning_high: str = ""
    _texts: int = 0
    _reasonings: int = 0
    _calls: list[_ToolInput] = field(default_factory=list)
    _by_index: dict[int, _ToolInput] = field(default_factory=dict)

    def feed(self, chunk: ChatCompletionChunk) -> list[StreamEvent]:
        if not isinstance(chunk, ChatCompletionChunk):  # e.g. a JSON array
            raise TypeError(f"not a chat.completion.chunk: {chunk!r:.200}")
        out: list[StreamEvent] = []
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = _usage(usage)
            self.usage_seen = True
        for choice in getattr(chunk, "choices", None) or ():
            # Fields a lenient server leaves out are simply missing (the SDK does not
            # validate chunks), hence getattr.
            if getattr(choice, "index", 0) not in (0, None):  # one choice is asked for
                continue
            delta = getattr(choice, "delta", None)
            if delta is not None:
                reasoning = _reasoning_text(delta)
                if reasoning:
                    out += self._reasoning_delta(reasoning)
                for key in ("content", "refusal"):
                    text = getattr(delta, key, None)
                    if isinstance(text, str) and text:
                        out += self._text_delta(text)
                tool_calls = getattr(delta, "tool_calls", None)
                if tool_calls is not None and not isinstance(tool_calls, list):
                    # Iterating a dict or a string made calls of its keys or letters:
                    # phantom calls with an empty tool name.
                    raise TypeError(f"delta.tool_calls is not a list: {tool_calls!r:.200}")
                for position, tool_call in enumerate(tool_calls or ()):
                    out += self._tool_delta(tool_call, position)
            reason = getattr(choice, "finish_reason", None)
            if reason is not None:
                self.finish_reason = str(reason)
                self.finished = True
                out += self.close()
        return out

    def close(self) -> list[StreamEvent]:
        """Close every open block and complete every tool call, in index order. After a
        ``length`` finish a call whose arguments are not whole JSON is left begun and
        never called: the model hit its output limit inside them, and the runtime ends
        such a call as "ended before this call's input was complete" (before, it ran
        with the cut text and failed as invalid JSON, the model then shown ``{}``)."""
        out = self.close_blocks()
        cut = self.finish_reason == "length"
        for call in sorted(self._calls, key=lambda c: c.index):
            if call.done:
                continue
            out += self._start_tool(call)
            call.done = True
            if cut and not _whole_json(call.arguments):
                continue
            out.append(ToolInputEnd(call_id=call.call_id))
            out.append(ToolCall(call_id=call.call_id, tool=call.tool, input=call.arguments or "{}"))
        return out

    def close_blocks(self) -> list[StreamEvent]:
        """Close the open text and reasoning blocks (tool inputs stay incomplete)."""
        return self._end_reasoning() + self._end_text()

    def end(self) -> list[StreamEvent]:
        """The events that end the step: whatever is open, then ``FinishStep``."""
        finish = FINISH_REASONS.get(self.finish_reason or "", "other")
        if self._calls and finish in ("stop", "other"):
            # Some OpenAI-compatible servers end a step of tool calls with "stop" (or
            # nothing): the calls are what the step asked for, and their results go
            # back to the model. ("length" keeps its name: the calls may be cut.)
            finish = "tool-calls"
        usage = self.usage if self.bounds is None else self.bounds(self.usage)
        return [*self.close(), FinishStep(finish_reason=finish, usage=usage)]

    def _end_text(self) -> list[StreamEvent]:
        if self._text is None:
            return []
        text_id, self._text = self._text, None
        out: list[StreamEvent] = []
        if self._text_high:  # half a pair, never completed: U+FFFD at the boundary
            out.append(TextDelta(id=text_id, delta=self._text_high))
            self._text_high = ""
        out.append(TextEnd(id=text_id))
        return out

    def _end_reasoning(self) -> list[StreamEvent]:
        if self._reasoning is None:
            return []
        reasoning_id, self._reasoning = self._reasoning, None
        out: list[StreamEvent] = []
        if self._reasoning_high:
            out.append(ReasoningDelta(id=reasoning_id, delta=self._reasoning_high))
            self._reasoning_high = ""
        out.append(ReasoningEnd(id=reasoning_id))
        return out

    def _text_delta(self, text: str) -> list[StreamEvent]:
        out = self._end_reasoning()
        if self._text is None:
            self._text = f"text-{self._texts}"
            self._texts += 1
            out.append(TextStart(id=self._text))
        text, self._text_high = _join_surrogates(self._text_high, text)
        if text:
            out.append(TextDelta(id=self._text, delta=text))
        self.content = True
        return out

    def _reasoning_delta(self, text: str) -> list[StreamEvent]:
        out = self._end_text()
        if self._reasoning is None:
            self._reasoning = f"reasoning-{self._reasonings}"
            self._reasonings += 1
            out.append(ReasoningStart(id=self._reasoning))
        text, self._reasoning_high = _join_surrogates(self._reasoning_high, text)
        if text:
            out.append(ReasoningDelta(id=self._reasoning, delta=text))
        self.content = True
        return out

    def _tool_delta(self, tool_call: Any, position: int) -> list[StreamEvent]:
        """One fragment of a tool call. Its call and its ``function`` must be objects (a
        string there is a malformed chunk, ``TypeError``); ``function.arguments`` is a
        fragment of JSON text, or, from some servers, the arguments as a JSON value,
        which is serialized (dropping it ran the tool with ``{}``)."""
        if not isinstance(tool_call, BaseModel):
            raise TypeError(f"a tool call is not an object: {tool_call!r:.200}")
        function = getattr(tool_call, "function", None)
        if function is not None and not isinstance(function, BaseModel):
            raise TypeError(f"a tool call's function is not an object: {function!r:.200}")
        # Checked before anything changes: a malformed chunk leaves the open blocks open,
        # for the provider to close (``close_blocks``) before its error.
        out = self.close_blocks()
        index = getattr(tool_call, "index", None)
        index = index if isinstance(index, int) else position
        call_id = getattr(tool_call, "id", None)
        call_id = call_id if isinstance(call_id, str) and call_id else None
        name = getattr(function, "name", None)
        name = name if isinstance(name, str) else ""
        fragment = getattr(function, "arguments", None)
        if fragment is None:
            fragment = ""
        elif not isinstance(fragment, str):
            fragment = json.dumps(fragment, ensure_ascii=False)

        call = self._by_index.get(index)
        # Some servers reuse one index for parallel calls; a new id means a new call.
        if call is not None and call_id and call.given_id and call_id != call.call_id:
            index = max(self._by_index) + 1
            call = None
        if call is None or call.done:
            call = _ToolInput(
                index=index,
                call_id=call_id or f"call_{index}",
                given_id=call_id is not None,
            )
            self._calls.append(call)
            self._by_index[index] = call
        elif call_id and not call.given_id and not call.started:
            call.call_id, call.given_id = call_id, True
        if name and not call.tool:
            call.tool = name
        if call.tool:
            out += self._start_tool(call)
        if fragment:
            call.arguments += fragment
            if call.started:
                out.append(ToolInputDelta(call_id=call.call_id, delta=fragment))
        self.content = True
        return out

    def _start_tool(self, call: _ToolInput) -> list[StreamEvent]:
        if call.started:
            return []
        call.started = True
        self.content = True
        out: list[StreamEvent] = [ToolInputStart(call_id=call.call_id, tool=call.tool)]
        if call.arguments:  # fragments that came before the tool's name
            out.append(ToolInputDelta(call_id=call.call_id, delta=call.arguments))
        return out


def _join_surrogates(held: str, text: str) -> tuple[str, str]:
    """The delta to send, and the high surrogate to hold for the next delta.

    A server whose strings are UTF-16 (JavaScript) may cut a chunk between the two
    halves of a surrogate pair (an emoji): ``"smile \\ud83d"`` then ``"\\ude00 done"``.
    JSON decodes each half alone, and a lone surrogate is no text (UTF-8 cannot encode
    it). So a high surrogate ending a delta is held back, and joined with a low one
    starting the block's next delta into the one character they encode; a half that
    finds no other half is sent as it is when its block ends, and becomes U+FFFD at
    the provider boundary (``events.without_nul``). ``text`` is not empty; the check
    costs one comparison per delta."""
    if held:
        if "\udc00" <= text[0] <= "\udfff":
            pair = 0x10000 + ((ord(held) - 0xD800) << 10) + (ord(text[0]) - 0xDC00)
            text = chr(pair) + text[1:]
        else:
            text = held + text
    if "\ud800" <= text[-1] <= "\udbff":
        return text[:-1], text[-1]
    return text, ""


def _reasoning_text(delta: Any) -> str | None:
    """The reasoning fragment of a delta (``reasoning_content``, else ``reasoning``)."""
    extra = getattr(delta, "model_extra", None) or {}
    for key in ("reasoning_content", "reasoning"):
        value = extra.get(key, getattr(delta, key, None))
        if isinstance(value, str) and value:
            return value
    return None


def _whole_json(text: str) -> bool:
    try:
        json.loads(text or "{}")
    except ValueError:
        return False
    return True


def _usage(usage: CompletionUsage) -> Usage:
    def count(obj: object, name: str) -> int:
        """The server's count, within what the log takes (a negative or absurd count
        from a broken server must not fail the step's write)."""
        value = getattr(obj, name, None)
        if isinstance(value, bool) or not isinstance(value, int):
            return 0
        return min(max(value, 0), MAX_TOKENS)

    return Usage(
        input=count(usage, "prompt_tokens"),
        output=count(usage, "completion_tokens"),
        reasoning=count(getattr(usage, "completion_tokens_details", None), "reasoning_tokens"),
        cache_read=count(getattr(usage, "prompt_tokens_details", None), "cached_tokens"),
        cache_write=0,
    )


# Usage past these cannot be true of the request it reports on (:func:`bound_usage`).
# Input counts under this are kept without a look: the check encodes the request, and
# a long session's steps report over 32,768 tokens as a rule (review).
INPUT_CHECKED_ABOVE = 200_000
# Output tokens of one call when the request set no maximum: above every model's output
# limit today (reasoning included), far under an absurd count (QA: 1,000,000 let a "Hi"
# bill a million output and a million reasoning tokens).
OUTPUT_CEILING = 262_144
_PER_ITEM = 8  # the chat template's tokens around a message or a tool, at most


def bound_usage(usage: Usage, *, params: Mapping[str, Any], max_output: int | None) -> Usage:
    """``usage`` within what the request ``params`` could have cost: input tokens at most
    the request's messages and tools in UTF-8 bytes (every token of a byte-level
    tokenizer covers at least one byte), plus :data:`_PER_ITEM` a message or tool for the
    chat template; output at most ``max_output`` (the request's ``max_output_tokens``),
    else :data:`OUTPUT_CEILING`; cached input and reasoning within them. A broken or
    hostile server reporting 10**18 tokens for a short prompt billed ~$750,000 against
    the budgets and compacted the session at its next turn (QA). The request is
    encoded only when the input reported is over :data:`INPUT_CHECKED_ABOVE`."""
    input_tokens = usage.input
    if input_tokens > INPUT_CHECKED_ABOVE:
        messages = params.get("messages") or []
        tools = params.get("tools") or []
        sent = json.dumps([messages, tools], ensure_ascii=False).encode("utf-8", "surrogatepass")
        input_tokens = min(input_tokens, len(sent) + _PER_ITEM * (len(messages) + len(tools)))
    output = min(usage.output, OUTPUT_CEILING if max_output is None else max(max_output, 0))
    bounded = replace(
        usage,
        input=input_tokens,
        output=output,
        reasoning=min(usage.reasoning, output),
        cache_read=min(usage.cache_read, input_tokens),
        cache_write=min(usage.cache_write, input_tokens),
    )
    if bounded != usage:
        logger.warning(
            "openai provider: the server reported usage no request of this size could "
            "cost (%s); counted %s",
            usage.as_tokens(),
            bounded.as_tokens(),
        )
    return bounded
