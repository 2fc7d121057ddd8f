"""Long-term memory end to end: chat through the API, roll with ``manage.py
roll_dialogs``, and see the next model request carry the summary, only through the
session's log (issue 10's first "must show"). The chat model is the ``openai``
provider against a real loopback server; summaries are extractive (offline small
model)."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.management import call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from accounts.selectors import tenant_for_user
from forge.runtime import abort_turn, start_turn
from memory import selectors as memory_selectors
from memory.normalize import MESSAGE_TEXT_MAX
from sessions import selectors
from tests.providers.fake_openai import FakeOpenAI, Status, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

PROMPTS = [
    "My name is Ada and I am planning a trip to Paris.",
    "I prefer trains over planes, always.",
    "Find me a quiet hotel near the Louvre.",
]


@pytest.fixture
def chat(settings: Any, user: Any, agents: Any) -> Iterator[tuple[APIClient, FakeOpenAI]]:
    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_MODEL = "openai/gpt-4o-mini"
        settings.FORGE_SMALL_MODEL = "offline/echo"
        settings.FORGE_MEMORY_ROLL_THRESHOLD = 4
        settings.FORGE_MEMORY_ROLL_KEEP = 2
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        yield api, fake


def say(api: APIClient, fake: FakeOpenAI, session_id: str, text: str, answer: str) -> None:
    fake.push(reply(text=[answer]))
    response = api.post(
        f"/api/sessions/{session_id}/messages/?wait=1", {"text": text}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["reply"]["info"]["error"] is None


def roll(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("roll_dialogs", "--once", "--json", *args, stdout=out)
    return json.loads(out.getvalue().strip().splitlines()[-1])


def the_core(user: Any) -> Any:
    tenant = tenant_for_user(user)
    core = memory_selectors.find_core(tenant=tenant, user=user, agent="build")
    assert core is not None
    return tenant, core


def test_threshold_rolling_reaches_the_next_request_through_the_log(chat, user):
    api, fake = chat
    session_id = api.post("/api/sessions/", {"title": "trip"}, format="json").json()["id"]
    for n, text in enumerate(PROMPTS):
        say(api, fake, session_id, text, f"Noted, answer {n}.")
    tenant, core = the_core(user)
    window = memory_selectors.dialogue_window(tenant=tenant, core=core)
    assert [m["text"] for m in window] == [
        PROMPTS[0],
        "Noted, answer 0.",
        PROMPTS[1],
        "Noted, answer 1.",
        PROMPTS[2],
        "Noted, answer 2.",
    ]
    assert fake.requests[-1]["messages"][0]["role"] == "system"
    assert "earlier dialogue" not in json.dumps(fake.requests[-1])  # nothing rolled yet

    report = roll()
    assert report["counts"] == {"rolled": 1}, report
    tenant, core = the_core(user)
    data = memory_selectors.core_data(tenant=tenant, core_id=core.pk)
    assert len(data["units"]) == 1
    unit = memory_selectors.unit_data(tenant=tenant, unit_id=data["units"][0])
    # The increment (the window's messages but the newest 2) went to the unit, and the
    # slice covers exactly its range; the window keeps the last 2, unrolled.
    assert [m["text"] for m in unit["conversation_messages"]] == [
        PROMPTS[0],
        "Noted, answer 0.",
        PROMPTS[1],
        "Noted, answer 1.",
    ]
    [slice_] = unit["slices"]
    assert (slice_["start_index"], slice_["end_index"]) == (0, 4)
    assert "Ada" in slice_["summary"]
    window = memory_selectors.dialogue_window(tenant=tenant, core=core)
    assert [m["text"] for m in window] == [PROMPTS[2], "Noted, answer 2."]  # kept: the last 2

    say(api, fake, session_id, "Which hotel did you pick?", "The quiet one.")
    sent = fake.requests[-1]["messages"]
    system = "\n".join(m["content"] for m in sent if m["role"] == "system")
    assert "Summaries of the earlier dialogue" in system
    assert slice_["summary"] in system
    # In place of the rolled turns: the model sees the kept turn verbatim, not the rolled.
    chat_texts = [m["content"] for m in sent if m["role"] != "system"]
    assert chat_texts == [PROMPTS[2], "Noted, answer 2.", "Which hotel did you pick?"]
    events = api.get(f"/api/sessions/{session_id}/events/?limit=1000").json()["results"]
    blocks = [
        block
        for event in events
        if event["type"] == "context.updated"
        for block in event["data"]["blocks"]
        if block["kind"] == "dialog_history"
    ]
    assert len(blocks) == 1  # written once, when it changed, before that prompt
    assert blocks[0]["slice_ids"] == [slice_["id"]]
    # The same request, replayed from the log alone:
    context = api.get(f"/api/sessions/{session_id}/context/").json()
    assert slice_["summary"] in "\n".join(context["system"])
    # A second turn with no new rolling logs no second block.
    say(api, fake, session_id, "Thanks!", "You're welcome.")
    events = api.get(f"/api/sessions/{session_id}/events/?limit=1000").json()["results"]
    assert (
        sum(
            1
            for e in events
            if e["type"] == "context.updated"
            and any(b["kind"] == "dialog_history" for b in e["data"]["blocks"])
        )
        == 1
    )


def test_idle_rolling_starts_a_new_unit_and_memory_session(chat, user):
    api, fake = chat
    session_id = api.post("/api/sessions/", {}, format="json").json()["id"]
    say(api, fake, session_id, PROMPTS[0], "Hello Ada.")
    tenant, core = the_core(user)
    first_memory_session = core.memory_session_id
    time.sleep(0.2)
    report = roll("--idle-after", "0.1")
    assert report["counts"] == {"rolled": 1}, report
    tenant, core = the_core(user)
    assert core.memory_session_id != first_memory_session
    assert memory_selectors.dialogue_window(tenant=tenant, core=core) == []  # all rolled
    say(api, fake, session_id, PROMPTS[1], "Trains it is.")
    time.sleep(0.2)
    roll("--idle-after", "0.1")
    tenant, core = the_core(user)
    units = [
        memory_selectors.unit_data(tenant=tenant, unit_id=unit_id)
        for unit_id in memory_selectors.core_data(tenant=tenant, core_id=core.pk)["units"]
    ]
    assert len(units) == 2
    assert units[0]["memory_session_id"] == first_memory_session
    assert units[1]["memory_session_id"] != first_memory_session
    assert [m["text"] for m in units[1]["conversation_messages"]] == [
        PROMPTS[1],
        "Trains it is.",
    ]


def test_a_reply_longer_than_a_memory_message_completes_and_is_remembered_clipped(chat, user):
    """A memory message holds at most ``MESSAGE_TEXT_MAX`` characters (the memory API
    refuses more). A reply that long (~25,000 output tokens) is a normal reply: it
    completes and counts, and its window copy is clipped. It used to fail the reply's
    completion (``UnknownError``, its tokens in no usage row)."""
    api, fake = chat
    session_id = api.post("/api/sessions/", {}, format="json").json()["id"]
    long = "lorem ipsum dolor sit amet " * 4000  # 108,000 characters
    for prompt in ("the first, which makes the core", "the second, into its window"):
        say(api, fake, session_id, prompt, long)
    tenant, core = the_core(user)
    window = memory_selectors.dialogue_window(tenant=tenant, core=core)
    answers = [m["text"] for m in window if m["role"] == "assistant"]
    assert [len(a) for a in answers] == [MESSAGE_TEXT_MAX, MESSAGE_TEXT_MAX]
    assert answers[0].startswith("lorem ipsum")
    assert answers[0].endswith("…")
    messages = api.get(f"/api/sessions/{session_id}/messages/").json()["results"]
    assert [p["text"] for p in messages[-1]["parts"] if p["type"] == "text"] == [long.strip()]
    used = api.get("/api/usage/?group_by=model").json()["results"]
    assert [(row["turns"], row["failed"]) for row in used] == [(2, 0)], used


def test_a_failed_reply_adds_nothing_to_the_window(chat, user):
    api, fake = chat
    session_id = api.post("/api/sessions/", {}, format="json").json()["id"]
    fake.push(Status(400, "bad request"))
    response = api.post(
        f"/api/sessions/{session_id}/messages/?wait=1", {"text": "this fails"}, format="json"
    )
    assert response.json()["reply"]["info"]["error"] is not None
    tenant = tenant_for_user(user)
    assert memory_selectors.find_core(tenant=tenant, user=user, agent="build") is None


async def test_an_aborted_reply_adds_nothing_to_the_window(session, user, agents, settings):
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.05
    started = await start_turn(session=session, text=" ".join(["word"] * 100))
    await asyncio.sleep(0.3)
    await abort_turn(session=session)
    reply_ = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    assert reply_["info"]["error"]["name"] == "MessageAbortedError"
    core = await database_sync_to_async(memory_selectors.find_core)(
        tenant=session.tenant, user=user, agent="build"
    )
    assert core is None
