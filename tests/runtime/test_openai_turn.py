"""Turns on the OpenAI provider (the official SDK, not mocked) against a real HTTP server
on loopback that speaks the Chat Completions streaming format."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from accounts.times import parse_time
from forge.runtime import start_turn
from tests.providers.fake_openai import (
    FakeOpenAI,
    Status,
    Stream,
    ToolCallScript,
    reply,
    usage_chunk,
)

from .conftest import ahistory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def openai_server(settings: Any) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        yield fake


async def run(session: Any, text: str) -> dict:
    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, 30)
    return (await ahistory(session))[-1]


async def test_reasoning_text_and_a_tool_call_that_completes_with_tokens_and_cost(
    session, agents, openai_server, settings
):
    openai_server.push(
        reply(
            reasoning=["The user wants ", "a file."],
            text=["I'll write it."],
            tool_calls=[
                ToolCallScript(
                    "call_a", "write_file", ['{"path": "a.txt", ', '"content": "hello"}']
                )
            ],
            finish_reason="tool_calls",
            usage=usage_chunk(120, 30, reasoning=12, cached=20),
        ),
        reply(text=["Wrote ", "a.txt."], usage=usage_chunk(180, 8)),
    )
    answer = await run(session, "write hello to a.txt")
    assert [p["type"] for p in answer["parts"]] == [
        "step-start",
        "reasoning",
        "text",
        "tool",
        "step-finish",
        "patch",
        "step-start",
        "text",
        "step-finish",
    ]
    parts = answer["parts"]
    assert parts[1]["text"] == "The user wants a file."
    assert parts[2]["text"] == "I'll write it."
    tool = parts[3]
    assert (tool["call_id"], tool["tool"]) == ("call_a", "write_file")
    assert tool["state"]["status"] == "completed"
    assert tool["state"]["input"] == {"path": "a.txt", "content": "hello"}
    first, second = parts[4], parts[8]
    assert first["reason"] == "tool-calls"
    assert first["tokens"] == {
        "input": 120,
        "output": 30,
        "reasoning": 12,
        "cache_read": 20,
        "cache_write": 0,
    }
    prices = settings.FORGE_MODEL_PRICES["openai/gpt-4o-mini"]
    expected = (100 * prices["input"] + 20 * prices["cache_read"] + 30 * prices["output"]) / 1e6
    assert first["cost"] == pytest.approx(expected)
    assert second["tokens"]["input"] == 180
    assert parts[7]["text"] == "Wrote a.txt."
    info = answer["info"]
    assert info["model"] == {"provider": "openai", "model": "gpt-4o-mini"}
    assert info["finish"] == "stop"
    assert info["tokens"] == second["tokens"]
    assert info["cost"] == pytest.approx(first["cost"] + second["cost"])
    # What the model was sent: the agent's system prompt, the tools, and on the second
    # step the assistant's tool call and the tool's result.
    first_request, second_request = openai_server.requests
    assert first_request["messages"][0] == {"role": "system", "content": "You are Forge."}
    assert first_request["stream_options"] == {"include_usage": True}
    assert "write_file" in {t["function"]["name"] for t in first_request["tools"]}
    assert second_request["messages"][-2]["tool_calls"][0]["id"] == "call_a"
    assert second_request["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "wrote 5 bytes to a.txt",
    }


async def test_retries_show_as_status_frames_then_the_reply_streams(
    session, agents, openai_server, record
):
    openai_server.push(Status(429, "slow down"), Status(503), reply(text=["finally"]))
    recorder = await record(session)
    answer = await run(session, "hello")
    frames = await recorder.settle()
    retries = [f for f in frames if f["kind"] == "status" and f["status"] == "retry"]
    assert [f["attempt"] for f in retries] == [2, 3]
    # An ISO-8601 time, as every time on the wire (QA: a UNIX number, which the chat
    # page read as milliseconds: "retrying at Jan 21").
    for frame in retries:
        assert parse_time(frame["next_at"]) > datetime.now(UTC) - timedelta(minutes=1)
    assert next(p for p in answer["parts"] if p["type"] == "text")["text"] == "finally"
    assert answer["info"]["error"] is None


async def test_the_status_is_busy_again_once_a_retried_call_streams(
    session, agents, openai_server, record
):
    """After ``retry``, the reply's first event says ``busy``: the chat page showed
    "retrying" for the rest of a reply whose retry had succeeded (QA)."""
    openai_server.push(Status(500), reply(text=["fine"]))
    recorder = await record(session)
    await run(session, "hello")
    frames = await recorder.settle()
    statuses = [f["status"] for f in frames if f["kind"] == "status"]
    assert statuses == ["busy", "retry", "busy", "idle"]


async def test_a_step_that_finishes_for_tool_calls_without_any_ends_the_reply(
    session, agents, openai_server
):
    """``finish_reason: tool_calls`` with no call (a server whose tool-call parser
    failed) has nothing new for a next step: the reply ends, not at the step limit
    after repeating the same request (QA)."""
    openai_server.push(*[reply(text=["I will call a tool"], finish_reason="tool_calls")] * 3)
    answer = await run(session, "hello")
    assert len(openai_server.requests) == 1
    assert answer["info"]["finish"] == "other"
    assert answer["info"]["error"] is None
    finishes = [p["reason"] for p in answer["parts"] if p["type"] == "step-finish"]
    assert finishes == ["other"]


async def test_when_retries_run_out_the_reply_ends_with_an_api_error(
    session, agents, openai_server, settings
):
    settings.FORGE_PROVIDER_MAX_ATTEMPTS = 2
    openai_server.push(Status(500), Status(500), reply(text=["later"]))
    answer = await run(session, "hello")
    error = answer["info"]["error"]
    assert error["name"] == "APIError"
    assert error["retryable"] is True
    assert error["status"] == 500
    assert answer["info"]["completed_at"] is not None
    assert len(openai_server.requests) == 2
    second = await run(session, "again")
    assert next(p for p in second["parts"] if p["type"] == "text")["text"] == "later"


async def test_a_malformed_chunk_or_a_dropped_connection_ends_the_reply_cleanly(
    session, agents, openai_server
):
    openai_server.push(
        Stream(chunks=[reply(text=["Hel"]).chunks[1], "{not json"]),
        Stream(chunks=reply(text=["partial answer"]).chunks[:2], done=False, drop=True),
        reply(text=["fine"]),
    )
    broken = await run(session, "one")
    assert broken["info"]["error"]["name"] in ("APIError", "ProviderError")
    dropped = await run(session, "two")
    assert dropped["info"]["error"] is not None
    assert dropped["info"]["completed_at"] is not None
    text = next(p for p in dropped["parts"] if p["type"] == "text")
    assert text["text"] == "partial answer"
    ok = await run(session, "three")
    assert ok["info"]["error"] is None
