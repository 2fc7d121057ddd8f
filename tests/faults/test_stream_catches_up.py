"""An open stream catches up on what happened while Redis was away, once it is back
(QA MEDIUM: an open socket and an SSE stream received nothing of a prompt and reply
logged during the outage, still nothing 38 s after Redis returned; the gap was filled
only when the next turn's events arrived).

The stream saw no activity before the outage, so nothing told it to look at the log:
the process's subscription reconnecting does (``forge.pubsub``, the hub's ``resync``
marker). The test's own ``redis-server`` is the channel layer; it is stopped, the log
written, and started again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from sessions import services
from tests.api.test_socket import backlog, frames_until, socket

from .test_redis_away import use_redis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _log_a_turn(session: Any) -> None:
    """A prompt and its finished reply, logged directly (two events): no runner, so the
    only way a stream hears of them is the bus, or the log."""
    prompt = services.update_message(session=session, info={"role": "user"}).data
    services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": prompt["id"],
            "completed_at": timezone.now().isoformat(),
        },
    )


async def test_an_idle_socket_gets_what_was_logged_during_the_outage_once_redis_is_back(
    settings, own_redis, session, token, caplog
):
    use_redis(settings, own_redis.url)
    caplog.set_level(logging.INFO, logger="forge.pubsub")
    ws = socket(session.pk, token)
    connected, _ = await ws.connect(timeout=20)
    assert connected
    opened = await backlog(ws)
    assert opened[-1] == {**opened[-1], "kind": "status", "status": "idle"}
    head = max(f["seq"] for f in opened if "seq" in f)

    own_redis.stop()
    await asyncio.sleep(3.5)  # the subscription's reader fails meanwhile, once a second

    await sync_to_async(_log_a_turn)(session)  # during the outage
    assert await ws.receive_nothing(timeout=1)
    own_redis.start()  # same port: Redis is back

    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "status", timeout=20)
    events = [f for f in frames if f.get("kind") == "event"]
    assert [f["seq"] for f in events] == [head + 1, head + 2]
    assert [f["data"]["role"] for f in events] == ["user", "assistant"]
    assert frames[-1]["status"] == "idle"
    await ws.disconnect()
    # The reader's failures: one traceback for the outage, not one a second (QA LOW), and
    # one line when it reads again.
    said = [r for r in caplog.records if r.name == "forge.pubsub"]
    assert len([r for r in said if r.exc_info and r.levelno >= logging.WARNING]) == 1
    assert any("reads again" in r.getMessage() for r in said)


async def test_a_quiet_socket_reads_a_turn_whose_every_frame_was_lost(
    settings, session, token, monkeypatch
):
    """A Redis that froze and resumed (a partition) drops no connection, so no reconnect
    says to look: a whole turn whose frames were all lost reached an idle socket only
    with the next turn's events (QA). A quiet stream that saw no turn open reads the
    log after its last seq every ``FORGE_STREAM_RECHECK_SECONDS``."""
    from sessions import bus

    settings.FORGE_STREAM_RECHECK_SECONDS = 1.0
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=20))[0]
    opened = await backlog(ws)
    head = max(f["seq"] for f in opened if "seq" in f)

    def a_turn_nobody_hears() -> None:
        with monkeypatch.context() as patched:
            patched.setattr(bus, "publish_many", lambda session_id, frames: None)
            _log_a_turn(session)

    await sync_to_async(a_turn_nobody_hears)()
    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "status", timeout=10)
    assert [f["seq"] for f in frames if f.get("kind") == "event"] == [head + 1, head + 2]
    assert frames[-1]["status"] == "idle"
    await ws.disconnect()
