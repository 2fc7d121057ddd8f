"""The OpenAI provider against a real HTTP server on loopback (the SDK is not mocked)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest

from forge.providers.base import ModelRequest, ToolSpec
from forge.providers.events import (
    Error,
    FinishStep,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Retry,
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
)
from forge.providers.openai import OpenAIProvider

from .conftest import FakeClock
from .fake_openai import (
    Body,
    FakeOpenAI,
    Status,
    Stream,
    ToolCallScript,
    chunk,
    reply,
    usage_chunk,
)

MakeProvider = Callable[..., OpenAIProvider]

REQUEST = ModelRequest(model="gpt-fake", messages=[{"role": "user", "content": "hi"}])

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


async def collect(provider: OpenAIProvider, request: ModelRequest = REQUEST) -> list[StreamEvent]:
    return [event async for event in provider.stream(request)]


def hello_reply() -> Stream:
    return reply(text=["Hel", "lo"], usage=usage_chunk(7, 2))


HELLO_EVENTS: list[StreamEvent] = [
    TextStart(id="text-0"),
    TextDelta(id="text-0", delta="Hel"),
    TextDelta(id="text-0", delta="lo"),
    TextEnd(id="text-0"),
    FinishStep(finish_reason="stop", usage=Usage(input=7, output=2)),
]


# --- streaming ----------------------------------------------------------------------


async def test_reasoning_text_and_usage(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(
        reply(
            reasoning=["Let me ", "think."],
            text=["Hello", ", ", "world!"],
            usage=usage_chunk(120, 40, reasoning=12, cached=64),
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        ReasoningStart(id="reasoning-0"),
        ReasoningDelta(id="reasoning-0", delta="Let me "),
        ReasoningDelta(id="reasoning-0", delta="think."),
        ReasoningEnd(id="reasoning-0"),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Hello"),
        TextDelta(id="text-0", delta=", "),
        TextDelta(id="text-0", delta="world!"),
        TextEnd(id="text-0"),
        FinishStep(
            finish_reason="stop",
            usage=Usage(input=120, output=40, reasoning=12, cache_read=64, cache_write=0),
        ),
    ]


async def test_reasoning_field_named_reasoning(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(
        Stream(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"reasoning": "hmm"}),
                chunk({"content": "ok"}),
                chunk(finish_reason="length"),
            ]
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        ReasoningStart(id="reasoning-0"),
        ReasoningDelta(id="reasoning-0", delta="hmm"),
        ReasoningEnd(id="reasoning-0"),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="ok"),
        TextEnd(id="text-0"),
        FinishStep(finish_reason="length", usage=Usage()),
    ]


async def test_tool_call_arguments_in_fragments(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fragments = ['{"ci', 'ty": "Par', 'is"}']
    fake_openai.push(
        reply(
            text=["Checking."],
            tool_calls=[ToolCallScript(id="call_abc", name="get_weather", fragments=fragments)],
            finish_reason="tool_calls",
            usage=usage_chunk(50, 20),
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Checking."),
        TextEnd(id="text-0"),
        ToolInputStart(call_id="call_abc", tool="get_weather"),
        ToolInputDelta(call_id="call_abc", delta='{"ci'),
        ToolInputDelta(call_id="call_abc", delta='ty": "Par'),
        ToolInputDelta(call_id="call_abc", delta='is"}'),
        ToolInputEnd(call_id="call_abc"),
        ToolCall(call_id="call_abc", tool="get_weather", input='{"city": "Paris"}'),
        FinishStep(finish_reason="tool-calls", usage=Usage(input=50, output=20)),
    ]


async def test_tool_calls_that_end_with_stop_are_tool_calls(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """A second-round finding: some OpenAI-compatible servers send finish_reason "stop"
    with tool calls; the turn ended and the model never saw the results."""
    fake_openai.push(
        reply(
            tool_calls=[ToolCallScript(id="call_1", name="get_weather", fragments=["{}"])],
            finish_reason="stop",
        )
    )

    events = await collect(make_provider())

    assert isinstance(events[-1], FinishStep)
    assert events[-1].finish_reason == "tool-calls"


async def test_parallel_tool_calls(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(
        reply(
            tool_calls=[
                ToolCallScript(id="call_1", name="get_weather", fragments=['{"city"', ': "Oslo"}']),
                ToolCallScript(id="call_2", name="get_time", fragments=[], index=1),
            ],
            finish_reason="tool_calls",
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        ToolInputStart(call_id="call_1", tool="get_weather"),
        ToolInputDelta(call_id="call_1", delta='{"city"'),
        ToolInputDelta(call_id="call_1", delta=': "Oslo"}'),
        ToolInputStart(call_id="call_2", tool="get_time"),
        ToolInputEnd(call_id="call_1"),
        ToolCall(call_id="call_1", tool="get_weather", input='{"city": "Oslo"}'),
        ToolInputEnd(call_id="call_2"),
        ToolCall(call_id="call_2", tool="get_time", input="{}"),
        FinishStep(finish_reason="tool-calls", usage=Usage(input=10, output=5)),
    ]


async def test_interleaved_parallel_tool_call_fragments(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return chunk({"tool_calls": [{"index": index, **fields}]})

    fake_openai.push(
        Stream(
            [
                call(0, id="a", type="function", function={"name": "f", "arguments": "{"}),
                call(1, id="b", type="function", function={"name": "g", "arguments": ""}),
                call(1, function={"arguments": "[1]"}),
                call(0, function={"arguments": "}"}),
                chunk(finish_reason="tool_calls"),
            ]
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        ToolInputStart(call_id="a", tool="f"),
        ToolInputDelta(call_id="a", delta="{"),
        ToolInputStart(call_id="b", tool="g"),
        ToolInputDelta(call_id="b", delta="[1]"),
        ToolInputDelta(call_id="a", delta="}"),
        ToolInputEnd(call_id="a"),
        ToolCall(call_id="a", tool="f", input="{}"),
        ToolInputEnd(call_id="b"),
        ToolCall(call_id="b", tool="g", input="[1]"),
        FinishStep(finish_reason="tool-calls", usage=Usage()),
    ]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("tool_calls", "tool-calls"),
        ("function_call", "tool-calls"),
        ("length", "length"),
        ("content_filter", "content-filter"),
        ("something_new", "other"),
    ],
)
async def test_finish_reasons(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, reason: str, expected: str
):
    fake_openai.push(reply(text=["x"], finish_reason=reason))

    events = await collect(make_provider())

    assert events[-1] == FinishStep(finish_reason=expected, usage=Usage(input=10, output=5))


async def test_no_finish_reason_is_other(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(Stream([chunk({"role": "assistant", "content": "x"})]))

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="x"),
        TextEnd(id="text-0"),
        FinishStep(finish_reason="other", usage=Usage()),
    ]


# --- what is sent -------------------------------------------------------------------


async def test_request_body(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(reply(text=["ok"]))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    request = ModelRequest(
        model="gpt-fake",
        system=["You are Forge.", "Be brief."],
        messages=messages,
        tools=[WEATHER],
        temperature=0.3,
        max_output_tokens=256,
    )

    await collect(make_provider(), request)

    [body] = fake_openai.requests
    assert body["model"] == "gpt-fake"
    assert body["messages"] == [
        {"role": "system", "content": "You are Forge."},
        {"role": "system", "content": "Be brief."},
        *messages,
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.3
    assert body["max_completion_tokens"] == 256
    assert fake_openai.headers[0]["authorization"] == "Bearer sk-test"


async def test_request_body_minimal(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(reply(text=["ok"]))

    await collect(make_provider())

    [body] = fake_openai.requests
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    for absent in ("tools", "temperature", "max_completion_tokens", "max_tokens"):
        assert absent not in body


# --- retries ------------------------------------------------------------------------


async def test_429_then_500_then_success(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, clock: FakeClock
):
    start = clock.now
    fake_openai.push(
        Status(429, "Rate limit reached", type="rate_limit_error"),
        Status(500, "The server had an error"),
        hello_reply(),
    )

    events = await collect(make_provider())

    assert events[0] == StartStep()
    first, second = events[1], events[2]
    assert isinstance(first, Retry)
    assert isinstance(second, Retry)
    assert (first.attempt, second.attempt) == (2, 3)
    assert "429" in first.message
    assert "Rate limit reached" in first.message
    assert "500" in second.message
    # exponential backoff with jitter: 0.5 s then 1 s, each up to 20 % more
    assert 0.5 <= first.next_at - start <= 0.6
    assert 1.0 <= second.next_at - first.next_at <= 1.2
    assert clock.sleeps == pytest.approx([first.next_at - start, second.next_at - first.next_at])
    assert events[3:] == HELLO_EVENTS
    assert len(fake_openai.requests) == 3


async def test_retry_after_header_is_honoured(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, clock: FakeClock
):
    start = clock.now
    fake_openai.push(Status(429, "slow down", headers={"retry-after": "3"}), hello_reply())

    events = await collect(make_provider())

    retry = events[1]
    assert isinstance(retry, Retry)
    assert (retry.attempt, retry.next_at) == (2, start + 3.0)
    assert clock.sleeps == [3.0]
    assert events[2:] == HELLO_EVENTS


async def test_retries_exhausted(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(*[Status(500, "The server had an error") for _ in range(6)])

    events = await collect(make_provider())

    assert events[0] == StartStep()
    retries = events[1:-1]
    assert [r.attempt for r in retries if isinstance(r, Retry)] == [2, 3, 4]
    assert len(retries) == 3
    error = events[-1]
    assert isinstance(error, Error)
    assert (error.name, error.retryable, error.status) == ("APIError", True, 500)
    assert "500" in error.message
    assert "The server had an error" in error.message
    assert "4 attempts" in error.message
    assert len(fake_openai.requests) == 4


async def test_max_attempts_is_configurable(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(*[Status(503, "overloaded") for _ in range(3)])

    events = await collect(make_provider(max_attempts=2))

    assert [type(e) for e in events] == [StartStep, Retry, Error]
    assert len(fake_openai.requests) == 2


async def test_retry_window_bounds_attempts(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, clock: FakeClock
):
    # backoff 0.5 s (+ jitter) fits a 1 s window; the next, 1 s later, does not.
    fake_openai.push(*[Status(502, "bad gateway") for _ in range(4)])

    events = await collect(make_provider(retry_window=1.0))

    assert [type(e) for e in events] == [StartStep, Retry, Error]
    assert len(fake_openai.requests) == 2
    error = events[-1]
    assert isinstance(error, Error)
    assert error.status == 502
    assert error.retryable is True


async def test_retry_after_beyond_the_window_gives_up(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, clock: FakeClock
):
    fake_openai.push(Status(429, "come back later", headers={"retry-after": "60"}), hello_reply())

    events = await collect(make_provider(retry_window=30.0))

    assert [type(e) for e in events] == [StartStep, Error]
    error = events[-1]
    assert isinstance(error, Error)
    assert (error.name, error.retryable, error.status) == ("APIError", True, 429)
    assert "come back later" in error.message
    # Why it gave up after one attempt (QA: "gave up after 1 attempt" alone).
    assert "the server asked to wait 60 s, past the retry window" in error.message
    assert clock.sleeps == []
    assert len(fake_openai.requests) == 1


async def test_slow_failures_use_up_the_window(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, clock: FakeClock
):
    """The window counts from the first attempt, including the time attempts take."""

    def takes_four_seconds() -> None:
        clock.now += 4.0

    fake_openai.on_request = takes_four_seconds
    fake_openai.push(*[Status(500, "boom") for _ in range(4)])

    events = await collect(make_provider(retry_window=8.0))

    # attempt 1: 0-4 s, attempt 2: 4.5-8.5 s; a third at >= 9.5 s is past the window
    # (the sleeps alone, 0.5 + 1 s, would have fit).
    assert [type(e) for e in events] == [StartStep, Retry, Error]
    assert len(fake_openai.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, status: int
):
    fake_openai.push(Status(status, "Invalid 'messages'", type="invalid_request_error"))

    events = await collect(make_provider())

    assert len(events) == 2
    error = events[1]
    assert isinstance(error, Error)
    assert (error.name, error.retryable, error.status) == ("APIError", False, status)
    assert str(status) in error.message
    assert "Invalid 'messages'" in error.message
    assert len(fake_openai.requests) == 1


async def test_connection_refused_is_retried(make_provider: MakeProvider):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    events = await collect(make_provider(base_url=f"http://127.0.0.1:{port}/v1", max_attempts=2))

    assert [type(e) for e in events] == [StartStep, Retry, Error]
    error = events[-1]
    assert isinstance(error, Error)
    assert error.retryable is True
    assert error.status is None
    assert "connection" in error.message.lower()


async def test_drop_before_content_is_retried(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(
        Stream([chunk({"role": "assistant", "content": ""})], drop=True),
        hello_reply(),
    )

    events = await collect(make_provider())

    assert events[0] == StartStep()
    retry = events[1]
    assert isinstance(retry, Retry)
    assert retry.attempt == 2
    assert "connection" in retry.message.lower()
    assert events[2:] == HELLO_EVENTS
    assert len(fake_openai.requests) == 2


async def test_drop_after_content_is_an_error(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(
        Stream(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Hel"}),
            ],
            drop=True,
        ),
        hello_reply(),
    )

    events = await collect(make_provider())

    assert events[:4] == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Hel"),
        TextEnd(id="text-0"),
    ]
    assert len(events) == 5
    error = events[4]
    assert isinstance(error, Error)
    assert error.retryable is True
    assert error.status is None
    assert len(fake_openai.requests) == 1  # no retry, so no duplicate "Hel"


async def test_drop_during_tool_input_drops_the_call(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(
        Stream(
            [
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_x",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"ci'},
                            }
                        ]
                    }
                )
            ],
            drop=True,
        )
    )

    events = await collect(make_provider())

    assert events[:3] == [
        StartStep(),
        ToolInputStart(call_id="call_x", tool="get_weather"),
        ToolInputDelta(call_id="call_x", delta='{"ci'),
    ]
    assert [type(e) for e in events[3:]] == [Error]


async def test_drop_after_finish_keeps_the_answer(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(Stream([chunk({"content": "Done."}), chunk(finish_reason="stop")], drop=True))

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Done."),
        TextEnd(id="text-0"),
        FinishStep(finish_reason="stop", usage=Usage()),
    ]
    assert len(fake_openai.requests) == 1


async def test_a_stream_that_stops_before_any_content_is_retried(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """A body that just ends (no ``finish_reason``, no ``[DONE]``: a server or proxy
    that closed early) is a dropped connection, not an empty answer (QA)."""
    fake_openai.push(Stream([chunk({"role": "assistant"})], done=False), hello_reply())

    events = await collect(make_provider())

    assert isinstance(events[1], Retry)
    assert events[2:] == HELLO_EVENTS
    assert len(fake_openai.requests) == 2


async def test_a_stream_that_stops_after_content_ends_with_an_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """Cut short after part of the answer: an error, never a finished reply (QA: it was
    stored as finished, a compaction's summary too)."""
    fake_openai.push(Stream([chunk({"content": "partial answer"})], done=False))

    events = await collect(make_provider())

    assert events[:4] == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="partial answer"),
        TextEnd(id="text-0"),
    ]
    error = events[4]
    assert isinstance(error, Error)
    assert "ended before the answer did" in error.message
    assert "after part of the reply was streamed" in error.message
    assert len(events) == 5
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (
            json.dumps(
                {
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": {"content": "not streamed"}}],
                }
            ),
            "application/json",
        ),
        ("<html><body>Please log in to the proxy</body></html>", "text/html"),
    ],
    ids=["json", "html"],
)
async def test_an_answer_that_is_no_event_stream_is_an_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, body: str, content_type: str
):
    """A 200 that holds no event stream was a silent empty reply (QA)."""
    fake_openai.push(Body(body, content_type=content_type))

    events = await collect(make_provider())

    assert events[0] == StartStep()
    error = events[1]
    assert isinstance(error, Error)
    assert error.retryable is False
    assert f"did not answer with an event stream (content-type: {content_type}" in error.message
    assert len(events) == 2
    assert len(fake_openai.requests) == 1  # it would answer the same again


async def test_an_error_code_is_part_of_the_message(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """An overflow that only its code names ("Input is too long …") is still one:
    compaction reads the message (QA)."""
    fake_openai.push(
        Status(
            400,
            "Input is too long for the requested model.",
            type="invalid_request_error",
            code="context_length_exceeded",
        )
    )

    events = await collect(make_provider())

    error = events[-1]
    assert isinstance(error, Error)
    assert error.message.endswith(
        "Input is too long for the requested model. (context_length_exceeded)"
    )


# --- malformed streams --------------------------------------------------------------


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", json.dumps({"choices": 5})])
async def test_malformed_chunk_is_an_error(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, bad: str
):
    fake_openai.push(Stream([chunk({"role": "assistant", "content": ""}), bad]))

    events = await collect(make_provider())

    assert len(events) == 2
    error = events[1]
    assert isinstance(error, Error)
    assert error.name in ("APIError", "ProviderError")
    assert error.retryable is False
    assert len(fake_openai.requests) == 1


async def test_malformed_chunk_after_text_closes_the_text(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(Stream([chunk({"content": "Hi"}), "{not json"]))

    events = await collect(make_provider())

    assert events[:4] == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Hi"),
        TextEnd(id="text-0"),
    ]
    assert isinstance(events[4], Error)
    assert len(events) == 5


async def test_error_object_in_the_stream(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(Stream([{"error": {"message": "model overloaded", "type": "server_error"}}]))

    events = await collect(make_provider())

    assert len(events) == 2
    error = events[1]
    assert isinstance(error, Error)
    assert "model overloaded" in error.message


# --- stalls -------------------------------------------------------------------------


@pytest.mark.parametrize("ping", [0.0, 0.1], ids=["silent", "comments only"])
async def test_a_stall_after_content_ends_the_step_within_the_timeout(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, ping: float
):
    """A model that stops mid-reply ends the step after ``timeout`` seconds without a
    stream event, whether the line is silent or kept alive by SSE comments (``: ping``):
    a comment resets httpx's read timeout, so it alone never bounded such a stream and
    the session stayed busy for as long as the proxy pinged."""
    fake_openai.push(Stream([chunk({"content": "Hel"})], stall=10, ping=ping))

    started = time.monotonic()
    events = await collect(make_provider(timeout=0.5))

    assert time.monotonic() - started < 5
    assert events[:4] == [
        StartStep(),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="Hel"),
        TextEnd(id="text-0"),
    ]
    assert events[4] == Error(
        name="APIError",
        message="the model server timed out (after part of the reply was streamed)",
        retryable=True,
    )
    assert len(events) == 5
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("ping", [0.0, 0.1], ids=["silent", "comments only"])
async def test_a_stall_before_content_is_retried(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, ping: float
):
    """Before any content, a stall (silent or comments only) is a timeout, retried."""
    fake_openai.push(Stream([chunk({"role": "assistant", "content": ""})], stall=10, ping=ping))
    fake_openai.push(hello_reply())

    events = await collect(make_provider(timeout=0.5))

    retry = events[1]
    assert isinstance(retry, Retry)
    assert retry.message == "the model server timed out"
    assert events[2:] == HELLO_EVENTS
    assert len(fake_openai.requests) == 2


# --- cancellation -------------------------------------------------------------------


async def test_cancel_stops_promptly_and_disconnects(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(reply(text=[f"word{i} " for i in range(400)], delay=0.05))
    provider = make_provider()
    seen: list[StreamEvent] = []
    streaming = asyncio.Event()

    async def consume() -> None:
        async for event in provider.stream(REQUEST):
            seen.append(event)
            if isinstance(event, TextDelta):
                streaming.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(streaming.wait(), timeout=5)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 1.0
    assert not any(isinstance(e, (FinishStep, Error)) for e in seen)
    assert await asyncio.to_thread(fake_openai.disconnected.wait, 5)


async def test_closing_the_stream_early_disconnects(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    fake_openai.push(reply(text=[f"word{i} " for i in range(400)], delay=0.05))
    provider = make_provider()

    async with aclosing(provider.stream(REQUEST)) as events:
        async for event in events:
            if isinstance(event, TextDelta):
                break

    assert await asyncio.to_thread(fake_openai.disconnected.wait, 5)


async def test_cancel_during_retry_sleep(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    fake_openai.push(Status(500, "boom"), hello_reply())
    provider = make_provider(sleep=asyncio.sleep, clock=time.time)
    retried = asyncio.Event()

    async def consume() -> None:
        async for event in provider.stream(REQUEST):
            if isinstance(event, Retry):
                retried.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(retried.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(fake_openai.requests) == 1


# --- settings -----------------------------------------------------------------------


async def test_from_settings(fake_openai: FakeOpenAI, settings: Any):
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = "sk-from-settings"
    settings.FORGE_PROVIDER_MAX_ATTEMPTS = 2
    settings.FORGE_PROVIDER_RETRY_WINDOW = 7.5
    settings.FORGE_PROVIDER_TIMEOUT = 3.0
    clock = FakeClock()
    provider = OpenAIProvider.from_settings("gpt-fake", sleep=clock.sleep, clock=clock)
    try:
        assert provider.name == "openai"
        assert provider.model == "gpt-fake"
        assert provider.policy.max_attempts == 2
        assert provider.policy.window == 7.5
        assert provider.timeout == 3.0
        assert provider.client.timeout == 3.0
        assert provider.client.max_retries == 0
        assert str(provider.client.base_url).rstrip("/") == fake_openai.base_url

        fake_openai.push(Status(500, "boom"), Status(500, "boom"), hello_reply())
        events = await collect(provider)
        assert [type(e) for e in events] == [StartStep, Retry, Error]  # 2 attempts
        assert fake_openai.headers[0]["authorization"] == "Bearer sk-from-settings"
    finally:
        await provider.aclose()


async def test_from_settings_without_a_key(fake_openai: FakeOpenAI, settings: Any):
    settings.OPENAI_BASE_URL = fake_openai.base_url
    settings.OPENAI_API_KEY = ""
    provider = OpenAIProvider.from_settings("local-model")
    try:
        fake_openai.push(hello_reply())
        events = await collect(provider)
        assert events[-1] == HELLO_EVENTS[-1]
        assert fake_openai.headers[0]["authorization"] == "Bearer not-needed"
        assert fake_openai.requests[0]["model"] == "gpt-fake"  # the request's model
    finally:
        await provider.aclose()


async def test_lenient_server_chunks(fake_openai: FakeOpenAI, make_provider: MakeProvider):
    """Servers that leave fields out: no tool-call index or id, no choices in the
    usage chunk, no completion/prompt token details."""
    base = chunk(finish_reason="tool_calls")
    usage_only = {k: v for k, v in base.items() if k != "choices"}
    usage_only["usage"] = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    fake_openai.push(
        Stream(
            [
                chunk({"role": "assistant"}),
                chunk(
                    {
                        "tool_calls": [
                            {"function": {"name": "f", "arguments": '{"a": 1}'}},
                            {"function": {"name": "g", "arguments": "{}"}},
                        ]
                    }
                ),
                base,
                usage_only,
            ]
        )
    )

    events = await collect(make_provider())

    assert events == [
        StartStep(),
        ToolInputStart(call_id="call_0", tool="f"),
        ToolInputDelta(call_id="call_0", delta='{"a": 1}'),
        ToolInputStart(call_id="call_1", tool="g"),
        ToolInputDelta(call_id="call_1", delta="{}"),
        ToolInputEnd(call_id="call_0"),
        ToolCall(call_id="call_0", tool="f", input='{"a": 1}'),
        ToolInputEnd(call_id="call_1"),
        ToolCall(call_id="call_1", tool="g", input="{}"),
        FinishStep(finish_reason="tool-calls", usage=Usage(input=9, output=4)),
    ]


def test_a_servers_absurd_usage_is_kept_within_what_the_log_takes():
    """A third-round finding's other side: the log now refuses more than
    ``MAX_TOKENS`` of a kind per step, so a broken server's count (negative, 2**70, a
    float) must not fail the step's write: it is clamped, or 0."""
    from openai.types.completion_usage import CompletionUsage

    from forge.providers.openai_chunks import _usage
    from sessions.shapes import MAX_TOKENS

    usage = _usage(
        CompletionUsage.model_construct(prompt_tokens=2**70, completion_tokens=-5, total_tokens=1.5)
    )
    assert (usage.input, usage.output) == (MAX_TOKENS, 0)


async def test_tool_call_arguments_sent_as_an_object_are_kept(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """A server that sends ``function.arguments`` as a JSON object (not the string
    OpenAI sends): the object is the call's input, serialized; it was dropped, and the
    tool ran with ``{}``."""
    arguments = {"city": "Paris", "days": [1, 2]}
    call = {"index": 0, "id": "call_1", "type": "function"}
    fake_openai.push(
        Stream(
            [
                chunk({"tool_calls": [{**call, "function": {"name": "get_weather"}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
                chunk(finish_reason="tool_calls"),
            ]
        )
    )

    events = await collect(make_provider())

    calls = [e for e in events if isinstance(e, ToolCall)]
    assert len(calls) == 1
    assert calls[0].tool == "get_weather"
    assert json.loads(calls[0].input) == arguments
    deltas = [e.delta for e in events if isinstance(e, ToolInputDelta)]
    assert "".join(deltas) == calls[0].input


@pytest.mark.parametrize(
    "tool_calls",
    [
        {"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": "{}"}},
        "get_weather",
        [{"index": 0, "function": "get_weather"}],
    ],
    ids=["an object", "a string", "function not an object"],
)
async def test_tool_calls_that_are_not_a_list_are_a_malformed_chunk(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, tool_calls: Any
):
    """``delta.tool_calls`` must be a list of call objects: anything else is a malformed
    chunk (a ProviderError, not retried), not a phantom call with an empty tool name."""
    fake_openai.push(Stream([chunk({"content": "Hi"}), chunk({"tool_calls": tool_calls})]))

    events = await collect(make_provider())

    assert not [e for e in events if isinstance(e, ToolInputStart | ToolCall)]
    error = events[-1]
    assert isinstance(error, Error)
    assert (error.name, error.retryable) == ("ProviderError", False)
    assert "malformed chunk" in error.message
    assert isinstance(events[-2], TextEnd)
    assert len(fake_openai.requests) == 1


async def test_a_surrogate_pair_split_across_chunks_arrives_whole(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """A server with UTF-16 strings (JavaScript) may cut an emoji between its two
    surrogates, one chunk each (the fake's JSON escapes them: ``"smile \\ud83d"``): the
    halves are joined into the character, in text and reasoning alike. A half that finds
    no other half before its block ends is sent alone when the block ends (the
    Processor makes it U+FFFD)."""
    fake_openai.push(
        reply(
            reasoning=["think \ud83e", "\udd14"],
            text=["smile \ud83d", "\ude00 done", " cut \ud800"],
        )
    )

    events = await collect(make_provider())

    assert events[1:-1] == [
        ReasoningStart(id="reasoning-0"),
        ReasoningDelta(id="reasoning-0", delta="think "),
        ReasoningDelta(id="reasoning-0", delta="\U0001f914"),
        ReasoningEnd(id="reasoning-0"),
        TextStart(id="text-0"),
        TextDelta(id="text-0", delta="smile "),
        TextDelta(id="text-0", delta="\U0001f600 done"),
        TextDelta(id="text-0", delta=" cut "),
        TextDelta(id="text-0", delta="\ud800"),
        TextEnd(id="text-0"),
    ]


async def test_a_credential_in_the_servers_error_is_not_passed_on(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """A QA finding: a model server (a proxy, a self-hosted one) that echoes the request's
    Authorization header in its error had the key logged in the reply's error, which
    every member of the tenant reads and which streams to them."""
    fake_openai.push(
        Status(
            401,
            "Incorrect API key provided: Bearer sk-SUPERSECRETKEY123 (also sk-configured-key-42)",
            type="invalid_request_error",
        )
    )
    events = await collect(make_provider(api_key="sk-configured-key-42"))
    error = events[1]
    assert isinstance(error, Error)
    assert "SUPERSECRET" not in error.message
    assert "configured-key" not in error.message
    assert error.message == (
        "HTTP 401 from the model server: Incorrect API key provided: Bearer [redacted] "
        "(also [redacted])"
    )


@pytest.mark.parametrize("max_output", [None, 500])
async def test_usage_no_request_could_cost_is_bounded(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, max_output
):
    """A server reporting 10**18 tokens for a two-letter prompt billed ~$750,000 and
    compacted the session at its next turn (QA). Input is counted at most as the
    request's bytes (every token covers at least one byte, plus a few per message for
    the chat template), output at most the request's ``max_output_tokens`` or a million;
    cached and reasoning tokens within them. Plausible counts are kept as reported."""
    huge = 10**18
    fake_openai.push(reply(text=["Hi"], usage=usage_chunk(huge, huge, reasoning=huge, cached=huge)))
    request = ModelRequest(
        model="gpt-fake", messages=[{"role": "user", "content": "hi"}], max_output_tokens=max_output
    )
    events = await collect(make_provider(), request)
    finish = events[-1]
    assert isinstance(finish, FinishStep)
    usage = finish.usage
    assert 0 < usage.input < 1_000
    assert usage.output == (max_output or 262_144)
    assert usage.reasoning == usage.output
    assert usage.cache_read == usage.input


@pytest.mark.parametrize("usage", [True, False])
async def test_a_finished_answer_is_not_held_open_by_a_server_that_never_ends_it(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, usage, monkeypatch
):
    """A server that sent the finish reason (and the usage) but neither ``[DONE]`` nor the
    end of the body kept the step, and so the session, busy for the whole provider
    timeout (120 s by default; QA). Reading stops at the usage that follows the finish
    reason, or ``FINISHED_GRACE`` seconds after the finish reason without one."""
    monkeypatch.setattr("forge.providers.openai.FINISHED_GRACE", 0.5)
    monkeypatch.setattr("forge.providers.openai.USAGE_GRACE", 0.5)
    stream = reply(text=["Hel", "lo"], usage=usage_chunk(7, 2))
    if not usage:
        stream.chunks.pop()
    stream.done, stream.stall = False, 30.0
    fake_openai.push(stream)
    started = time.monotonic()
    events = await collect(make_provider(timeout=25.0))
    assert time.monotonic() - started < 10  # not the 25 s timeout, nor the 30 s stall
    assert events[1:-1] == HELLO_EVENTS[:-1]
    assert events[-1] == FinishStep("stop", Usage(input=7, output=2) if usage else Usage())


async def test_a_call_cut_by_the_output_limit_is_begun_and_never_called(
    fake_openai: FakeOpenAI, make_provider: MakeProvider
):
    """After ``finish_reason: length`` a call whose arguments are not whole JSON was
    called with the cut text (it failed as invalid JSON, and the model was then shown
    ``{}``; QA). It is left begun: the runtime ends it as cut. A whole one is called."""
    fake_openai.push(
        reply(
            tool_calls=[
                ToolCallScript("a", "f", ['{"x": 1}']),
                ToolCallScript("b", "g", ['{"path": "a.txt", "content": "unfin'], index=1),
            ],
            finish_reason="length",
        )
    )
    events = await collect(make_provider())
    calls = [e.call_id for e in events if isinstance(e, ToolCall)]
    begun = [e.call_id for e in events if isinstance(e, ToolInputStart)]
    assert (calls, begun) == (["a"], ["a", "b"])
    assert events[-1] == FinishStep(finish_reason="length", usage=Usage(input=10, output=5))


async def test_usage_that_comes_seconds_after_the_finish_reason_is_counted(
    fake_openai: FakeOpenAI, make_provider: MakeProvider, monkeypatch
):
    """Some proxies send the usage chunk seconds after the finish reason: cut at the 2 s
    given to [DONE], the step was billed nothing (QA). The usage has its own, longer
    grace; [DONE] after it keeps the short one. (Here every chunk comes 0.6 s after the
    last, against a [DONE] grace of 0.3 s.)"""
    monkeypatch.setattr("forge.providers.openai.FINISHED_GRACE", 0.3)
    monkeypatch.setattr("forge.providers.openai.USAGE_GRACE", 5.0)
    fake_openai.push(reply(text=["Hi"], usage=usage_chunk(5_000, 700), delay=0.6))
    events = await collect(make_provider(timeout=25.0))
    assert events[-1] == FinishStep("stop", Usage(input=5_000, output=700))
