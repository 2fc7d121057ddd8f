"""Redis going away and coming back (findings 1 and 6 of the reliability issue).

Each test runs its own ``redis-server`` as the channel layer, the cache and the
in-flight mirror, and stops it: reads keep working while it is away, a reply
it cut ends (the session does not stay busy), and once it is back prompts work
again on every session, without restarting anything.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import channel_layers
from rest_framework.test import APIClient

from forge.runtime import start_turn
from forge.settings.base import caches
from forge.settings.base import channel_layers as layer_settings
from sessions import selectors, services
from sessions.services import create_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def use_redis(settings: Any, url: str) -> None:
    settings.CACHES = caches(url, prefix="forge-faults")
    settings.CHANNEL_LAYERS = layer_settings(url, prefix="forge-faults")
    settings.REDIS_URL = url
    channel_layers.backends = {}


@pytest.fixture
def said(session: Any, user_message: dict[str, Any]) -> dict[str, Any]:
    """A user message with its text, written before the outage."""
    services.update_part(
        session=session,
        part={"message_id": user_message["id"], "type": "text", "text": "before the outage"},
    )
    return user_message


def test_reads_succeed_while_redis_is_down(settings, own_redis, session, token, said, as_app_role):
    """Every read answers with its data (as the application role on PostgreSQL)."""
    use_redis(settings, own_redis.url)
    own_redis.stop()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")

    def read(url: str) -> Any:
        response = api.get(url)
        assert response.status_code == 200, (url, response.content)
        return response.json()

    base = f"/api/sessions/{session.pk}"
    assert [s["id"] for s in read("/api/sessions/")["results"]] == [session.pk]
    assert (read(f"{base}/")["id"], read(f"{base}/")["title"]) == (session.pk, "First chat")
    messages = read(f"{base}/messages/")
    assert [m["info"]["id"] for m in messages["results"]] == [said["id"]]
    assert [p["text"] for p in messages["results"][0]["parts"]] == ["before the outage"]
    assert messages["head_seq"] == 3
    events = read(f"{base}/events/")["results"]
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "session.created"),
        (2, "message.updated"),
        (3, "part.updated"),
    ]
    context = read(f"{base}/context/")
    assert "before the outage" in json.dumps(context["messages"])


async def _reply(session: Any, message_id: str) -> dict[str, Any]:
    return await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=message_id
    )


async def test_a_redis_restart_mid_reply_wedges_nothing(settings, own_redis, session, user, agents):
    use_redis(settings, own_redis.url)
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.02
    other = await database_sync_to_async(create_session)(user=user, title="another")
    started = await start_turn(session=session, text=" ".join(["word"] * 200))
    await asyncio.sleep(0.5)  # mid-reply
    own_redis.stop()
    await asyncio.wait_for(started.task, 30)  # the reply ends: no wedged runner
    cut = await _reply(session, started.assistant_message_id)
    assert cut["info"]["completed_at"] is not None
    own_redis.start()  # same port: Redis is back
    for each in (session, other):
        again = await start_turn(session=each, text="are you back?")
        await asyncio.wait_for(again.task, 30)
        reply = await _reply(each, again.assistant_message_id)
        assert reply["info"]["error"] is None
        assert reply["info"]["completed_at"] is not None
        assert "".join(p["text"] for p in reply["parts"] if p["type"] == "text") == (
            "are you back?"
        )


def test_throttles_answer_at_once_while_redis_is_frozen_and_ask_it_again_later(
    settings, own_redis, session, token, user
):
    """A frozen Redis (``SIGSTOP``: connections open, no answer) costs the first request
    the cache's socket timeout, not a hang; then the throttles stop asking it for a
    while (no throttle history is written, though Redis is back), then ask again."""
    import redis

    from forge.throttling import ask_the_cache_again

    use_redis(settings, own_redis.url)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get(f"/api/sessions/{session.pk}/").status_code == 200  # connections made
    history = redis.Redis.from_url(own_redis.url)
    assert history.keys("*throttle_user_*")
    history.flushall()
    own_redis.pause()
    try:
        frozen = api.get(f"/api/sessions/{session.pk}/")
    finally:
        own_redis.resume()
    assert frozen.status_code == 200, frozen.content
    assert api.get(f"/api/sessions/{session.pk}/").status_code == 200
    assert history.keys("*throttle_*") == []  # Redis is back, but the pause holds
    ask_the_cache_again()
    assert api.get(f"/api/sessions/{session.pk}/").status_code == 200
    assert history.keys("*throttle_user_*")


async def test_a_process_that_never_joined_its_abort_inbox_runs_prompts_while_redis_is_down(
    settings, own_redis, session, agents
):
    """A process that had not joined its abort inbox yet failed every prompt while Redis
    was away ("could not reach its channel layer"), while one that had joined ran them
    (QA, LOW). Now the turn runs, and the inbox is joined once Redis is back: then an
    abort sent through the layer, as another process sends it, stops the turn."""
    from channels.layers import get_channel_layer

    from forge.runtime import lease
    from forge.runtime.inbox import runner_group

    use_redis(settings, own_redis.url)
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.02  # 600 words: 12 s, the time to come back and abort
    settings.FORGE_LEASE_SECONDS = 1.5  # the inbox is tried again every renewal (0.5 s)
    own_redis.stop()
    short = await start_turn(session=session, text="anyone there?")
    await asyncio.wait_for(short.task, 30)
    reply = await _reply(session, short.assistant_message_id)
    assert reply["info"]["error"] is None
    assert "".join(p["text"] for p in reply["parts"] if p["type"] == "text") == "anyone there?"

    started = await start_turn(session=session, text=" ".join(["word"] * 600))
    await asyncio.sleep(0.5)
    own_redis.start()  # same port: Redis is back
    await asyncio.sleep(2)  # a renewal interval or more: the inbox is joined meanwhile
    assert not started.task.done()
    await get_channel_layer().group_send(
        runner_group(lease.OWNER), {"type": "forge.abort", "session_id": session.pk}
    )
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, 10)
    aborted = await _reply(session, started.assistant_message_id)
    assert aborted["info"]["error"]["name"] == "MessageAbortedError"
    assert aborted["info"]["error"]["message"] == "aborted"
