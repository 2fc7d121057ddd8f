"""A Redis that stops answering (``SIGSTOP``, a partition: connections stay open, no
reply comes) while a reply streams.

The bus and the in-flight mirror are best effort (the log is the truth, and streams
repair gaps from it), so a turn must not wait on them: a 1.5 s reply stayed open for
the whole outage (64 s; every prompt meanwhile refused as busy), and each frame that
could not be published logged a whole traceback (a QA finding: 36 for one reply).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from channels.db import database_sync_to_async

from forge.runtime import lease, start_turn
from sessions import bus, selectors

from .test_redis_away import use_redis

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

WORDS = 150  # at 10 ms a word: a 1.5 s reply


async def test_a_frozen_redis_neither_holds_the_turn_nor_floods_the_log(
    settings, own_redis, session, agents, caplog
):
    use_redis(settings, own_redis.url)
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.01
    text = " ".join(["word"] * WORDS)
    warm = await start_turn(session=session, text="hello")  # connections made
    await asyncio.wait_for(warm.task, 10)
    caplog.set_level(logging.WARNING)
    started = await start_turn(session=session, text=text)
    await asyncio.sleep(0.3)  # mid-reply
    own_redis.pause()
    try:
        began = time.monotonic()
        await asyncio.wait_for(asyncio.shield(started.task), 30)
        took = time.monotonic() - began
        busy = await database_sync_to_async(lease.is_busy)(session_id=session.pk)
    finally:
        own_redis.resume()
    assert took < 4.0, f"the reply took {took:.1f} s to end while Redis was frozen"
    assert not busy
    reply = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    assert reply["info"]["error"] is None
    assert "".join(p["text"] for p in reply["parts"] if p["type"] == "text") == text
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) <= 1, [r.getMessage() for r in tracebacks]
    failing = [r for r in caplog.records if r.name == bus.__name__]
    assert len(failing) <= 2, [r.getMessage() for r in failing]


async def test_publishing_says_once_when_it_fails_and_once_when_it_recovers(
    settings, own_redis, session, agents, caplog
):
    use_redis(settings, own_redis.url)
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.01
    caplog.set_level(logging.INFO, logger=bus.__name__)
    warm = await start_turn(session=session, text="hello")
    await asyncio.wait_for(warm.task, 10)
    own_redis.stop()
    cut = await start_turn(session=session, text=" ".join(["word"] * 50))
    await asyncio.wait_for(cut.task, 30)
    await bus.flush()
    own_redis.start()
    bus.try_publishing_again()  # (else after the breaker's pause)
    after = await start_turn(session=session, text="are you back?")
    await asyncio.wait_for(after.task, 30)
    await bus.flush()
    said = [r.getMessage() for r in caplog.records if r.name == bus.__name__]
    assert len(said) == 2, said
    assert "failing" in said[0]
    assert "again" in said[1]
    assert "frames" in said[1]
    assert not any(r.exc_info for r in caplog.records if r.name == bus.__name__)
