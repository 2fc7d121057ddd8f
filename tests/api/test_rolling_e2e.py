"""End to end through the API on the ``openai`` provider (the official SDK) against the
loopback OpenAI-format server: chat past the rolling threshold, ``roll_dialogs``, and
what the model is sent afterwards (issue 18's trim).

After a rolling, the next request holds the ``dialog_history`` block and the last
``keep`` messages verbatim, and no rolled turn raw; over several more rollings
its size stays bounded with no compaction; the recall tools still reach every
rolled turn; and ``replay_session`` gives back every request the server received,
byte for byte."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from forge.providers.base import ModelRequest, ToolSpec
from forge.providers.openai import OpenAIProvider
from memory import selectors as memory_selectors
from sessions import selectors
from sessions.models import SessionEvent
from tests.providers.fake_openai import FakeOpenAI, ToolCallScript, reply, usage_chunk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

THRESHOLD, KEEP = 8, 2
HISTORY_CHARS = 1000  # the block's budget: its oldest slices drop out past it
LIMIT = 16_000  # the model's window (tokens); the last turn before each rolling fills it
FILLER = ("Some more words about it, so that every turn weighs a little. " * 4).strip()


def question(i: int) -> str:
    """Turn ``i``'s prompt: an extractive summary keeps its first sentence; ``RAWQnn``
    is in the raw turn only."""
    return f"Turn {i} asks about topic{i}. RAWQ{i:02d} is the detail. {FILLER}"


def answer(i: int) -> str:
    return f"Answer {i} on topic{i}. RAWA{i:02d} is the detail. {FILLER}"


@pytest.fixture
def openai_server(settings: Any) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        settings.FORGE_SMALL_MODEL = "offline/echo"  # titles and extractive summaries
        settings.FORGE_MEMORY_ROLL_THRESHOLD = THRESHOLD
        settings.FORGE_MEMORY_ROLL_KEEP = KEEP
        settings.FORGE_MEMORY_HISTORY_CHARS = HISTORY_CHARS
        settings.FORGE_CONTEXT_LIMITS = {"openai/gpt-4o-mini": LIMIT}
        settings.FORGE_OUTPUT_RESERVE = 96
        yield fake


def say(api: Any, fake: FakeOpenAI, session: Any, i: int, *, full: bool = False) -> dict[str, Any]:
    """Turn ``i``; ``full``: the server reports a window nearly full (a turn of a long
    chat before a rolling): once the rolling trimmed the context, that usage is stale
    and must not make the next turn compact."""
    prompt_tokens = LIMIT - 100 if full else 500
    fake.push(reply(text=[answer(i)], usage=usage_chunk(prompt_tokens, 40)))
    response = api.post(
        f"/api/sessions/{session.pk}/messages/?wait=1", {"text": question(i)}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["reply"]["info"]["error"] is None
    return dict(response.json())


def roll_dialogs() -> dict[str, Any]:
    out = io.StringIO()
    call_command("roll_dialogs", "--once", "--json", stdout=out)
    return dict(json.loads(out.getvalue().strip().splitlines()[-1]))


def rolled_turns(session: Any) -> int:
    """How many of the session's turns the speaker's memory holds (rolled)."""
    core = memory_selectors.find_core(tenant=session.tenant, user=session.user, agent="build")
    assert core is not None
    return (core.rolled_seq) // 2


def body_text(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


def check_trimmed(body: dict[str, Any], *, rolled: int, last: int) -> None:
    """The request right after a rolling of turns ``[0, rolled)`` whose newest turn is
    ``last``: the block (system), the kept turns verbatim, no rolled turn raw."""
    system = [m["content"] for m in body["messages"] if m["role"] == "system"]
    chat = [m for m in body["messages"] if m["role"] != "system"]
    assert any(text.startswith("Summaries of the earlier dialogue") for text in system), system
    # The summaries may quote a rolled turn (the block is system text); the chat
    # messages must not hold one.
    sent = body_text({"messages": chat})
    for i in range(rolled):
        assert f"RAWQ{i:02d}" not in sent, i
        assert f"RAWA{i:02d}" not in sent, i
    # the keep newest messages before this prompt, verbatim, then the prompt
    kept = [question(i) if n % 2 == 0 else answer(i) for i in range(rolled, last) for n in (0, 1)]
    assert [m["content"] for m in chat] == [*kept, question(last)]
    assert len(kept) == KEEP


def test_rollings_trim_what_the_model_sees_and_replay_stays_exact(
    api, session, agents, openai_server
):
    fake = openai_server
    for i in range(THRESHOLD // 2):  # 4 turns: 8 messages in the window
        say(api, fake, session, i, full=i == THRESHOLD // 2 - 1)
    before = body_text(fake.requests[-1])
    assert "RAWQ00" in before
    assert "Summaries of the earlier dialogue" not in before

    report = roll_dialogs()
    assert report["counts"] == {"rolled": 1}, report
    assert report["cores"][0]["messages"] == THRESHOLD - KEEP  # the newest 2 stay unrolled
    assert rolled_turns(session) == 3

    turn = THRESHOLD // 2
    say(api, fake, session, turn)
    first_after = fake.requests[-1]
    check_trimmed(first_after, rolled=3, last=turn)
    block = next(
        b
        for e in selectors.events_after(tenant=session.tenant, session_id=session.pk, limit=1000)
        if e["type"] == "context.updated"
        for b in e["data"]["blocks"]
        if b["kind"] == "dialog_history"
    )
    assert block["text"] in [m["content"] for m in first_after["messages"]]
    assert block["rolled_through"] is not None

    # several more rollings: the request stays bounded while the history grows
    sizes = [len(body_text(first_after))]
    for _ in range(5):
        for n in range((THRESHOLD - KEEP) // 2 - 1):  # fill the window up to the threshold
            turn += 1
            say(api, fake, session, turn, full=n == (THRESHOLD - KEEP) // 2 - 2)
        report = roll_dialogs()
        assert report["counts"] == {"rolled": 1}, report
        rolled = rolled_turns(session)
        assert rolled == turn  # everything but the newest turn
        turn += 1
        say(api, fake, session, turn)
        check_trimmed(fake.requests[-1], rolled=rolled, last=turn)
        sizes.append(len(body_text(fake.requests[-1])))
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    whole = sum(len(question(i)) + len(answer(i)) for i in range(turn))
    assert len(history) == 2 * (turn + 1)
    assert not SessionEvent.objects.filter(session=session, type="session.compacted").exists()
    # The chat part of each request is exactly the kept turn and the prompt (above); the
    # block grows until its budget is full, then stays: the request is bounded.
    bound = sizes[0] + HISTORY_CHARS
    assert max(sizes) <= bound, sizes
    assert abs(sizes[-1] - sizes[-2]) < 100, sizes  # the block is full: no more growth
    assert max(sizes) < whole  # smaller, tools and all, than the raw turns it stands for
    # The block stands for every rolled turn: the oldest slices, past its budget, are in
    # its condensed digest (``memory.digest``), not dropped (a QA finding, HIGH).
    system = "\n".join(m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "system")
    assert "Older dialogue, condensed:" in system
    assert "topic0." in system
    assert "not summarized here" not in system

    # the chat (and the API) still shows every turn
    page = api.get(f"/api/sessions/{session.pk}/messages/?limit=200").json()["results"]
    shown = json.dumps(page)
    assert "RAWQ00" in shown
    assert "RAWA00" in shown
    assert len(page) == len(history)

    # the recall tools reach a rolled turn: history_search finds it, history_read reads it
    oldest = history[0]["info"]["id"]
    fake.push(
        reply(
            tool_calls=[ToolCallScript("call_s", "history_search", ['{"query": "RAWQ00"}'])],
            finish_reason="tool_calls",
        ),
        reply(
            tool_calls=[ToolCallScript("call_r", "history_read", [f'{{"ids": ["{oldest}"]}}'])],
            finish_reason="tool_calls",
        ),
        reply(text=["Found it."]),
    )
    response = api.post(
        f"/api/sessions/{session.pk}/messages/?wait=1",
        {"text": "What was the detail of the first turn?"},
        format="json",
    )
    assert response.status_code == 200, response.content
    searched, read = fake.requests[-2]["messages"][-1], fake.requests[-1]["messages"][-1]
    assert searched["role"] == read["role"] == "tool"
    assert oldest in searched["content"]
    assert "RAWQ00 is the detail" in read["content"]

    # replay_session gives back every request the server received, byte for byte
    starts = list(
        SessionEvent.objects.filter(session=session, type="part.updated", data__type="step-start")
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    assert len(starts) == len(fake.requests)
    provider = OpenAIProvider("gpt-4o-mini", base_url=fake.base_url, api_key="sk-test")
    for seq, received in zip(starts, fake.requests, strict=True):
        out = io.StringIO()
        call_command("replay_session", session.pk, "--at", str(seq), "--json", stdout=out)
        replayed = json.loads(out.getvalue())
        request = ModelRequest(
            model=replayed["model"],
            system=replayed["system"],
            messages=replayed["messages"],
            tools=[ToolSpec(**tool) for tool in replayed["tools"]],
            temperature=replayed["temperature"],
            max_output_tokens=replayed["max_output_tokens"],
        )
        # The SDK sends the keywords in its own order: compare canonical JSON, byte for byte.
        canonical = json.dumps(provider.request_params(request), ensure_ascii=False, sort_keys=True)
        assert canonical == json.dumps(received, ensure_ascii=False, sort_keys=True), seq
