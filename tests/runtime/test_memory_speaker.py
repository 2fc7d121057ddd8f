"""Memory is the speaker's (issue 17, MEDIUM 4; CONTRACT §2): in a session shared by two
users of one tenant, each turn's dialogue goes to the core of the user who sent the
prompt, and the memory tools and the ``dialog_history`` block read that user's core,
whoever owns the session. Through every face, under a real daphne (on the server
stack as the row-level security application role).

The model is ``offline/echo``: ``/tool NAME {json}`` makes it call the tool, and the
step after reports the tool's output as the reply's text, so a reply shows what the
memory tools gave the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from forge.models import Agent
from memory import selectors as memory_selectors
from memory.models import MemoryCore, MemorySlice
from sessions import selectors
from sessions.models import Session
from tests.live import LiveServer, daphne
from tests.tools.test_memory_tools import remember

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

SEARCH = '/tool memory_search {"query": "rocket banana"}'
ALICE_SAYS = "Alice plans the rocket launch"  # alice's memory: a summarized slice
CAROL_SAYS = "Carol bakes banana bread"  # carol's


@dataclass
class World:
    tenant: Any
    alice: Any  # owns the session
    carol: Any  # another member of the tenant
    session: Session
    alice_slice: MemorySlice
    carol_slice: MemorySlice
    tokens: dict[str, str]


@pytest.fixture
def world(tenant: Any, user: Any, session: Session, agents: Any) -> World:
    from accounts.models import Membership, User

    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=tenant, user=carol)
    alice_core = remember(tenant, user, "build", ALICE_SAYS)
    carol_core = remember(tenant, carol, "build", CAROL_SAYS)
    return World(
        tenant=tenant,
        alice=user,
        carol=carol,
        session=session,
        alice_slice=MemorySlice.objects.get(unit__core=alice_core),
        carol_slice=MemorySlice.objects.get(unit__core=carol_core),
        tokens={
            name: Token.objects.get_or_create(user=who)[0].key
            for name, who in (("alice", user), ("carol", carol))
        },
    )


@pytest.fixture
def live(tmp_path: Path, world: World) -> Iterator[LiveServer]:
    with daphne(tmp_path) as server:
        yield server


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Token {token}"}


def window(world: World, who: Any) -> list[str]:
    core = MemoryCore.objects.get(tenant=world.tenant, user=who, agent="build")
    return [m["text"] for m in memory_selectors.dialogue_window(tenant=world.tenant, core=core)]


def message(world: World, message_id: str, session_id: str | None = None) -> dict[str, Any]:
    return selectors.get_message(
        tenant=world.tenant, session_id=session_id or world.session.pk, message_id=message_id
    )


def tool_state(reply: dict[str, Any], tool: str = "memory_search") -> dict[str, Any]:
    [part] = [p for p in reply["parts"] if p["type"] == "tool" and p["tool"] == tool]
    state: dict[str, Any] = part["state"]
    return state


def prompt_http(live: LiveServer, world: World, who: str, text: str) -> dict[str, Any]:
    """A prompt through ``POST …/messages/?wait=1``; the finished reply, as stored."""
    answer = httpx.post(
        f"{live.url}/api/sessions/{world.session.pk}/messages/?wait=1",
        json={"text": text},
        headers=auth(world.tokens[who]),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["reply"]["info"]["completed_at"], body
    return message(world, body["assistant_message_id"])


def context_text(live: LiveServer, world: World, at: int | None = None) -> str:
    """The system text the model was (``at``) or would be sent, replayed from the log."""
    query = f"?at={at}" if at is not None else ""
    answer = httpx.get(
        f"{live.url}/api/sessions/{world.session.pk}/context/{query}",
        headers=auth(world.tokens["alice"]),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return "\n".join(answer.json()["system"])


def seq_of(world: World, message_id: str) -> int:
    seq = selectors.message_start_seq(
        tenant=world.tenant, session=world.session, message_id=message_id
    )
    assert seq is not None
    return seq


def sees_only(state: dict[str, Any], mine: str, theirs: str) -> None:
    assert state["status"] == "completed", state
    assert mine in state["output"], state["output"]
    assert theirs not in state["output"], state["output"]


def assert_spoken_by(world: World, reply: dict[str, Any], who: Any) -> None:
    """The log says who spoke: the prompt and the reply both carry the speaker."""
    assert reply["info"]["user_id"] == who.pk
    asked = message(world, reply["info"]["parent_id"])
    assert asked["info"]["user_id"] == who.pk


# --- the HTTP prompt: both directions, the block, replay ------------------------------------


def test_two_users_in_one_session_each_get_their_own_memory(live, world):
    alice_before, carol_before = window(world, world.alice), window(world, world.carol)

    # carol speaks in alice's session: her memory, her block, her window.
    carols = prompt_http(live, world, "carol", SEARCH)
    assert window(world, world.alice) == alice_before  # not a word of carol's
    sees_only(tool_state(carols), CAROL_SAYS, ALICE_SAYS)
    assert_spoken_by(world, carols, world.carol)
    read = prompt_http(
        live, world, "carol", f'/tool memory_read {{"slice_id": "{world.alice_slice.pk}"}}'
    )
    state = tool_state(read, "memory_read")
    assert state["status"] == "error"
    assert state["error"] == f"no memory slice {world.alice_slice.pk!r}"
    assert ALICE_SAYS not in json.dumps(read)
    context = context_text(live, world)
    assert CAROL_SAYS in context
    assert ALICE_SAYS not in context
    assert window(world, world.alice) == alice_before  # not a word of carol's
    assert window(world, world.carol)[: len(carol_before)] == carol_before
    carols_new = window(world, world.carol)[len(carol_before) :]
    assert carols_new[0] == SEARCH
    assert CAROL_SAYS in carols_new[1]
    assert ALICE_SAYS not in json.dumps(carols_new)

    # The reverse: alice speaks next, and the block switches back to hers.
    carol_after = window(world, world.carol)
    alices = prompt_http(live, world, "alice", SEARCH)
    sees_only(tool_state(alices), ALICE_SAYS, CAROL_SAYS)
    assert_spoken_by(world, alices, world.alice)
    context = context_text(live, world)
    assert ALICE_SAYS in context
    assert CAROL_SAYS not in context
    assert window(world, world.carol) == carol_after  # not a word of alice's
    alices_new = window(world, world.alice)[len(alice_before) :]
    assert alices_new[0] == SEARCH
    assert ALICE_SAYS in alices_new[1]
    assert CAROL_SAYS not in json.dumps(alices_new)

    # Replay at each turn's seq shows what that turn's model saw.
    at_carol = context_text(live, world, at=seq_of(world, carols["info"]["id"]))
    assert CAROL_SAYS in at_carol
    assert ALICE_SAYS not in at_carol
    at_alice = context_text(live, world, at=seq_of(world, alices["info"]["id"]))
    assert ALICE_SAYS in at_alice
    assert CAROL_SAYS not in at_alice

    # A log that names its speakers is still a canonical log: it exports and imports.
    exported = "".join(selectors.export_lines(session=world.session))
    assert f'"user_id":{world.carol.pk}' in exported.replace(" ", "")
    imported = httpx.post(
        f"{live.url}/api/sessions/import/?copy=1",
        content=exported.encode(),
        headers={**auth(world.tokens["alice"]), "Content-Type": "application/x-ndjson"},
        timeout=30,
    )
    assert imported.status_code == 201, imported.text


# --- the other faces ------------------------------------------------------------------------


def test_a_socket_prompt_is_the_sockets_users(live, world):
    alice_before = window(world, world.alice)
    with connect(
        f"{live.ws_url}/ws/sessions/{world.session.pk}/?after=0",
        additional_headers={**auth(world.tokens["carol"]), "Origin": live.url},
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps({"type": "prompt", "text": SEARCH, "client_id": "c"}))
        reply_id = None
        while True:
            frame = json.loads(ws.recv(timeout=60))
            if frame["kind"] == "ack":
                reply_id = frame["assistant_message_id"]
            elif frame["kind"] == "error":
                raise AssertionError(frame)
            elif (
                frame["kind"] == "event"
                and frame["type"] == "message.updated"
                and frame["data"]["id"] == reply_id
                and frame["data"]["completed_at"]
            ):
                break
    reply = message(world, reply_id)
    sees_only(tool_state(reply), CAROL_SAYS, ALICE_SAYS)
    assert_spoken_by(world, reply, world.carol)
    assert window(world, world.alice) == alice_before
    assert window(world, world.carol)[-2] == SEARCH


def chat(live: LiveServer, token: str, body: dict[str, Any]) -> None:
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", f"{live.url}/api/chat", json=body, headers=auth(token)) as answer,
    ):
        assert answer.status_code == 200, answer.read()
        lines = list(answer.iter_lines())
    assert lines[-1] == "data: [DONE]" or "data: [DONE]" in lines, lines[-5:]


def last_reply(world: World, session_id: str | None = None) -> dict[str, Any]:
    session = Session.objects.get(pk=session_id or world.session.pk)
    found = selectors.last_message(tenant=world.tenant, session=session, role="assistant")
    assert found is not None
    return found


def test_an_ai_sdk_chat_message_is_the_posters(live, world):
    alice_before = window(world, world.alice)
    prompt = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": SEARCH}]}
    chat(
        live,
        world.tokens["carol"],
        {"id": world.session.pk, "trigger": "submit-message", "messages": [prompt]},
    )
    reply = last_reply(world)
    sees_only(tool_state(reply), CAROL_SAYS, ALICE_SAYS)
    assert_spoken_by(world, reply, world.carol)
    assert window(world, world.alice) == alice_before
    assert window(world, world.carol)[-2] == SEARCH


def test_regenerating_is_speaking_the_regenerating_users_memory_answers(live, world):
    alices = prompt_http(live, world, "alice", SEARCH)
    sees_only(tool_state(alices), ALICE_SAYS, CAROL_SAYS)
    alice_before, carol_before = window(world, world.alice), window(world, world.carol)

    chat(
        live,
        world.tokens["carol"],
        {"id": world.session.pk, "trigger": "regenerate-message", "messages": []},
    )
    again = last_reply(world)
    assert again["info"]["id"] != alices["info"]["id"]
    assert again["info"]["parent_id"] == alices["info"]["parent_id"]
    sees_only(tool_state(again), CAROL_SAYS, ALICE_SAYS)
    assert again["info"]["user_id"] == world.carol.pk  # the regenerating user
    assert message(world, again["info"]["parent_id"])["info"]["user_id"] == world.alice.pk
    assert window(world, world.alice) == alice_before  # carol's answer is not alice's memory
    # carol asked that prompt again: her window holds it with her answer.
    new = window(world, world.carol)[len(carol_before) :]
    assert new[0] == SEARCH
    assert CAROL_SAYS in new[1]
    assert len(new) == 2


def test_a_subtask_inherits_the_speaker(live, world):
    Agent.objects.create(
        name="rememberer", system_prompt="You remember.", tools=["memory_search"], step_limit=4
    )
    # Memory is per (user, agent): both users have some with the subtask's agent too.
    remember(world.tenant, world.alice, "rememberer", ALICE_SAYS)
    remember(world.tenant, world.carol, "rememberer", CAROL_SAYS)
    task = json.dumps({"agent": "rememberer", "description": "recall", "prompt": SEARCH})
    reply = prompt_http(live, world, "carol", f"/tool task {task}")
    state = tool_state(reply, "task")
    assert state["status"] == "completed", state
    child_id = state["metadata"]["child_session_id"]
    child_reply = last_reply(world, child_id)
    sees_only(tool_state(child_reply), CAROL_SAYS, ALICE_SAYS)
    assert child_reply["info"]["user_id"] == world.carol.pk
