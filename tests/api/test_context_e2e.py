"""End to end through the API on the ``openai`` provider (the official SDK) against the
loopback OpenAI-format server: an automatic compaction, then what the model sees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessions.models import SessionEvent
from tests.providers.fake_openai import FakeOpenAI, ToolCallScript, reply, usage_chunk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

OLDEST = "the oldest turn names the zebra-quartz ledger"


@pytest.fixture
def openai_server(settings: Any) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        settings.FORGE_SMALL_MODEL = "openai/gpt-4o-mini"
        settings.FORGE_CONTEXT_LIMITS = {"openai/gpt-4o-mini": 4096}
        settings.FORGE_OUTPUT_RESERVE = 96
        settings.FORGE_COMPACT_TAIL_TOKENS = 10
        yield fake


def say(api: Any, session: Any, text: str) -> dict[str, Any]:
    response = api.post(
        f"/api/sessions/{session.pk}/messages/?wait=1", {"text": text}, format="json"
    )
    assert response.status_code in (200, 201, 202), response.content
    return dict(response.json())


def test_after_a_compaction_the_request_carries_the_summary_not_the_oldest_turn(
    api, session, agents, openai_server
):
    openai_server.push(
        reply(text=["Noted."], usage=usage_chunk(50, 2)),
        # this step reports a window nearly full: the next step compacts first
        reply(text=["Sure."], usage=usage_chunk(4000, 2)),
        reply(text=["## Goal\nkeep the ledger\n## Progress\nSUMMARY-OF-EARLIER-TURNS"]),
        reply(text=["Continuing from the summary."], usage=usage_chunk(300, 5)),
    )
    say(api, session, OLDEST)
    say(api, session, "a second turn")
    say(api, session, "a third turn")
    assert SessionEvent.objects.filter(session=session, type="session.compacted").count() == 1
    summary_request, after = openai_server.requests[2], openai_server.requests[3]
    assert OLDEST in str(summary_request["messages"])
    sent = str(after["messages"])
    assert "SUMMARY-OF-EARLIER-TURNS" in sent
    assert OLDEST not in sent
    assert "a third turn" in sent
    messages = api.get(f"/api/sessions/{session.pk}/messages/?limit=200").json()["results"]
    texts = str([item["parts"] for item in messages])
    assert OLDEST in texts
    assert "Continuing from the summary." in texts
    assert sum(1 for item in messages if item["info"]["role"] == "user") == 4

    # the model recalls what the summary hid: history_search over the whole log
    openai_server.push(
        reply(
            tool_calls=[ToolCallScript("call_s", "history_search", ['{"query": "zebra quartz"}'])],
            finish_reason="tool_calls",
            usage=usage_chunk(400, 5),
        ),
        reply(text=["Found it."], usage=usage_chunk(500, 3)),
    )
    answer = say(api, session, "what did the oldest turn name?")
    found = openai_server.requests[-1]["messages"][-1]
    assert found["role"] == "tool"
    assert "zebra-quartz ledger" in found["content"]
    oldest_id = next(item for item in messages if item["info"]["role"] == "user")["info"]["id"]
    assert oldest_id in found["content"]
    assert answer["reply"]["info"]["error"] is None
