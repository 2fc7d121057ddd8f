"""``trigger: "regenerate-message"`` under a real daphne: the last reply's prompt is
answered again as a new assistant message with the same parent; the old reply stays
in the log, superseded, hidden from the model and from the UIMessage history.
Refusals are JSON before any stream, and write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from forge.context import request_for
from forge.context.superseded import drop_superseded
from forge.models import SessionLease
from sessions.models import Session, SessionEvent
from tests.live import LiveServer, daphne
from tests.replies import paced, words

from .test_chat_routes import Chunks, chat_body, chat_history, chat_session, headers
from .ui import expected_parts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def regenerate_body(chat_id: str, **extra: Any) -> dict[str, Any]:
    """What ``chat.regenerate()`` sends: the messages up to the prompt, the trigger."""
    prompt = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "ignored"}]}
    return {"id": chat_id, "trigger": "regenerate-message", "messages": [prompt], **extra}


def history(chat_id: str) -> list[dict[str, Any]]:
    return chat_history(chat_id)


def post_stream(live: LiveServer, token: str, body: dict[str, Any]) -> Chunks:
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{live.url}/api/chat", json=body, headers=headers(token)) as answer,
    ):
        assert answer.status_code == 200, answer.read()
        reader = Chunks(answer)
        reader.rest()
    return reader


@pytest.fixture
def scripted(tmp_path: Path, agents: Any) -> Any:
    """``offline/script`` answers by the number of assistant messages the model is sent:
    a model that saw the superseded reply would answer with the next reply."""
    script = tmp_path / "script.json"
    first, second = paced(["first ", "answer"], 0), paced(["second ", "answer"], 0)
    script.write_text(json.dumps([first, second]))
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        yield live


def test_a_regenerated_reply_is_a_new_message_with_the_same_parent(
    scripted: LiveServer, user, token
):
    post_stream(scripted, token, chat_body("regen1"))
    prompt, old = history("regen1")

    reader = post_stream(scripted, token, regenerate_body("regen1", messageId=old["info"]["id"]))
    items = history("regen1")
    assert [item["info"]["id"] for item in items[:2]] == [prompt["info"]["id"], old["info"]["id"]]
    new = items[2]
    assert new["info"]["role"] == "assistant"
    assert new["info"]["parent_id"] == prompt["info"]["id"]
    assert new["info"]["completed_at"]
    assert new["info"]["error"] is None
    assert items[1] == old  # the old reply is untouched, append-only
    assert reader.chunks[0] == {"type": "start", "messageId": new["info"]["id"]}
    assert reader.ui.parts == expected_parts(new)
    # The model was sent the prompt alone, so the script answered with reply 1 again.
    assert {"type": "text", "text": "first answer"} in reader.ui.parts
    _, request = request_for(chat_session("regen1"))
    assert [m["role"] for m in request.messages] == ["user", "assistant"]
    assert len(list(drop_superseded(items))) == 2

    listed = httpx.get(f"{scripted.url}/api/chat/regen1/messages", headers=headers(token)).json()
    assert [m["id"] for m in listed["results"]] == [prompt["info"]["id"], new["info"]["id"]]

    # The next turn continues from the kept reply: the model is sent one reply.
    later = post_stream(scripted, token, chat_body("regen1", "and then?"))
    assert {"type": "text", "text": "second answer"} in later.ui.parts
    ids: list[str] = []
    url: str | None = f"{scripted.url}/api/chat/regen1/messages?limit=2"
    while url:  # pages of 2: the superseded reply's page may not hold its newer reply
        page = httpx.get(url, headers=headers(token)).json()
        ids = [m["id"] for m in page["results"]] + ids
        url = page["next"]
    assert old["info"]["id"] not in ids
    assert ids[:2] == [prompt["info"]["id"], new["info"]["id"]]
    assert len(ids) == 4

    # Only the last reply can be regenerated; its prompt's id names it too.
    regen1 = chat_session("regen1")
    before = SessionEvent.objects.filter(session=regen1).count()
    refused = httpx.post(
        f"{scripted.url}/api/chat",
        json=regenerate_body("regen1", messageId=new["info"]["id"]),
        headers=headers(token),
    )
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "not_last_reply"
    assert SessionEvent.objects.filter(session=regen1).count() == before
    assert not SessionLease.objects.filter(session_id=regen1.pk).exists()
    last_prompt = history("regen1")[-2]["info"]["id"]
    again = post_stream(scripted, token, regenerate_body("regen1", messageId=last_prompt))
    assert {"type": "text", "text": "second answer"} in again.ui.parts
    assert [item["info"]["role"] for item in history("regen1")] == [
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
        "assistant",
    ]
    # A live client names its user message by the id it made ("u1" in the messages it
    # sends): that is the last reply too (a third-round finding: a 409, and the client
    # had already dropped the reply it showed).
    client_side = post_stream(scripted, token, regenerate_body("regen1", messageId="u1"))
    assert {"type": "text", "text": "second answer"} in client_side.ui.parts
    assert len(history("regen1")) == 7
    # An earlier prompt named by the id the chat has (a client that reloaded the history)
    # is not the last reply's, though the client's messages end with it: a 409 (QA
    # MEDIUM: the last reply was regenerated, and the client showed it under the first
    # question).
    before = SessionEvent.objects.filter(session=regen1).count()
    first = {"id": prompt["info"]["id"], "role": "user", "parts": [{"type": "text", "text": "x"}]}
    earlier = httpx.post(
        f"{scripted.url}/api/chat",
        json={**regenerate_body("regen1", messageId=prompt["info"]["id"]), "messages": [first]},
        headers=headers(token),
    )
    assert earlier.status_code == 409, earlier.text
    assert earlier.json()["error"]["code"] == "not_last_reply"
    assert SessionEvent.objects.filter(session=regen1).count() == before


@pytest.fixture
def slow(tmp_path: Path, agents: Any) -> Any:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([paced(words(60), 0.05)] * 3))
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        yield live


def test_refusals_are_json_and_write_nothing(slow: LiveServer, session, token, stranger_token):
    def refused(body: dict[str, Any], status: int, code: str, token: str = token) -> None:
        before = SessionEvent.objects.count()
        answer = httpx.post(f"{slow.url}/api/chat", json=body, headers=headers(token))
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["error"]["code"] == code
        assert SessionEvent.objects.count() == before
        assert not SessionLease.objects.exists()

    refused(regenerate_body(session.pk), 409, "nothing_to_regenerate")  # an empty chat
    refused(regenerate_body("noSuchChat"), 404, "not_found")  # never created by regenerate
    assert not Session.objects.filter(chat_alias="noSuchChat").exists()
    refused(regenerate_body(session.pk, messageId=7), 400, "invalid")
    refused(regenerate_body(session.pk), 404, "not_found", stranger_token)

    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{slow.url}/api/chat", json=chat_body(session.pk), headers=headers(token)
        ) as response,
    ):
        Chunks(response).until(lambda c: c["type"] == "text-delta")
        busy = client.post(
            f"{slow.url}/api/chat", json=regenerate_body(session.pk), headers=headers(token)
        )
        assert (busy.status_code, busy.json()["error"]["code"]) == (409, "busy")
        stop = client.post(f"{slow.url}/api/chat/{session.pk}/stop", headers=headers(token))
        assert stop.status_code == 204
    aborted = history(session.pk)[-1]
    assert aborted["info"]["error"]["name"] == "MessageAbortedError"

    # An aborted reply is regenerated like any other (the usual "try again").
    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST", f"{slow.url}/api/chat", json=regenerate_body(session.pk), headers=headers(token)
        ) as response,
    ):
        reader = Chunks(response)
        start = reader.next()
        assert start is not None
        assert start["messageId"] != aborted["info"]["id"]
        reader.until(lambda c: c["type"] == "text-delta")
        client.post(f"{slow.url}/api/chat/{session.pk}/stop", headers=headers(token))
        reader.rest()
    assert [item["info"]["role"] for item in history(session.pk)] == [
        "user",
        "assistant",
        "assistant",
    ]


def test_drop_superseded_keeps_the_newest_reply_to_each_prompt():
    def item(id_: str, role: str, parent: str | None = None, **info: Any) -> dict[str, Any]:
        return {"info": {"id": id_, "role": role, "parent_id": parent, **info}, "parts": []}

    items = [
        item("m1", "user"),
        item("m2", "assistant", "m1"),
        item("m3", "assistant", "m1"),
        item("m4", "user"),
        item("m5", "assistant", "m4", summary=True),
        item("m6", "assistant", "m4", summary=True),
        item("m7", "user"),
        item("m8", "assistant", "m7"),
    ]
    kept = [i["info"]["id"] for i in drop_superseded(items)]
    assert kept == ["m1", "m3", "m4", "m5", "m6", "m7", "m8"]


def test_memory_records_a_regenerated_answer_without_repeating_its_prompt(session, agents):
    """(In process, no server loop: each turn runs to its end before the call returns.)"""
    from forge import runtime
    from memory import selectors as memory

    first = runtime.prompt(session=session, text="remember me")
    assert first.reply is not None
    again = runtime.regenerate(session=session, message_id=first.assistant_message_id)
    assert again.message["info"]["id"] == first.message["info"]["id"]
    assert again.reply is not None
    assert again.reply["info"]["parent_id"] == first.message["info"]["id"]
    core = memory.find_core(tenant=session.tenant, user=session.user, agent="build")
    assert core is not None
    window = memory.dialogue_window(tenant=session.tenant, core=core)
    answer = first.reply["parts"]  # the echo: the same text both times
    assert any(p["type"] == "text" and p["text"] == "remember me" for p in answer)
    # The new answer took the old one's place (the old one was not rolled yet): memory
    # holds one answer, as the chat shows one.
    assert [(m["role"], m["text"]) for m in window] == [
        ("user", "remember me"),
        ("assistant", "remember me"),
    ]
    from memory.models import DialogueMessage

    assert list(
        DialogueMessage.objects.filter(core=core)
        .order_by("seq")
        .values_list("message_id", flat=True)
    ) == [first.message["info"]["id"], again.assistant_message_id]


def test_a_reply_whose_turn_compacted_can_be_regenerated(session, agents):
    """QA (LOW): a turn whose request overflowed compacts the history mid-turn and then
    answers: the compaction's summary is logged after the reply opened, so the chat's
    newest assistant message is the summary, and regenerating was refused 409
    ``nothing_to_regenerate``. The reply is still the chat's last: a summary after it
    whose kept tail holds its prompt is no turn. One whose tail does not (the reply is
    inside the summary) still refuses."""
    from forge import runtime
    from forge.context.boundary import record_compaction
    from forge.errors import NothingToRegenerate

    first = runtime.prompt(session=session, text="an answer worth redoing")
    assert first.reply is not None
    prompt_id = first.message["info"]["id"]
    record_compaction(
        session, summary="S", auto=True, overflow=True, tail_start_id=prompt_id, model="x/y"
    )
    again = runtime.regenerate(session=session, message_id=first.assistant_message_id)
    assert again.reply is not None
    assert again.reply["info"]["parent_id"] == prompt_id

    record_compaction(
        session, summary="S2", auto=False, overflow=False, tail_start_id=None, model="x/y"
    )
    with pytest.raises(NothingToRegenerate):
        runtime.regenerate(session=session)


def test_regenerating_a_chat_that_ends_with_an_unanswered_prompt_answers_it(session, agents, user):
    """QA (MEDIUM): a fork at a reply ends with that reply's prompt, unanswered.
    Regenerating it answered the *previous* prompt again, appended after the trailing
    one: the model was sent both prompts in a row and the real answer to the first was
    superseded. As the AI SDK's ``regenerate()`` means when the last message is the
    user's, the trailing prompt is answered; a fork at the first reply too (it was 409)."""
    from forge import runtime
    from forge.errors import NotLastReply

    runtime.prompt(session=session, text="alpha one")
    second = runtime.prompt(session=session, text="beta two")
    fork = runtime.fork_session(
        session=session, user=user, before_message_id=second.assistant_message_id
    )
    prompts = [m["info"]["id"] for m in chat_history(fork.pk) if m["info"]["role"] == "user"]
    with pytest.raises(NotLastReply):
        runtime.regenerate(session=fork, message_id=prompts[0])
    again = runtime.regenerate(session=fork, message_id=prompts[-1])
    assert again.reply is not None
    assert again.reply["info"]["parent_id"] == prompts[-1]
    _, request = request_for(fork)
    said = [(m["role"], m.get("content")) for m in request.messages if m["role"] != "system"]
    assert said[-1] == ("assistant", "beta two")  # the echo answered the trailing prompt
    assert [role for role, _ in said] == ["user", "assistant", "user", "assistant"]

    first_only = runtime.fork_session(  # [alpha one], its reply left out
        session=fork, user=user, before_message_id=chat_history(fork.pk)[1]["info"]["id"]
    )
    answered = runtime.regenerate(session=first_only)
    assert answered.reply is not None
    assert answered.reply["info"]["parent_id"] == chat_history(first_only.pk)[0]["info"]["id"]


def test_regenerating_after_the_prompt_was_removed_is_nothing_to_regenerate(session, agents):
    """QA (LOW): with the last reply's prompt removed (a plugin's ``remove_message``), the
    refusal was 404 "no message … in this session", which reads as a missing chat."""
    from forge import runtime
    from forge.errors import NothingToRegenerate
    from sessions import services

    runtime.prompt(session=session, text="first")
    last = runtime.prompt(session=session, text="second")
    services.remove_message(session=session, message_id=last.message["info"]["id"])
    with pytest.raises(NothingToRegenerate):
        runtime.regenerate(session=session)
