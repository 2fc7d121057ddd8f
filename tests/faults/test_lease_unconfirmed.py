"""A runner that cannot confirm its lease stops its turn before the lease can expire.

The lease is what makes one process run a turn: once it may have expired, another
process's janitor (or prompt) finalizes the reply as interrupted. A runner whose
renewals fail (PostgreSQL's connections terminated, a partition) used to stream on
past that point, so clients saw more text, and a second ``idle``, after the stored
reply had ended (a QA finding: 749 characters streamed, 344 stored). A runner frozen
past its lease (``SIGSTOP``) that resumed pushed the text of its window, restored its
in-flight mirror, and so a stale ``part.snapshot`` of a finalized part, before its
heartbeat found the lease gone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError
from django.utils import timezone

from forge.models import SessionLease
from forge.runtime import lease, start_turn
from forge.runtime.recovery import recover_session
from sessions import bus, selectors

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

LEASE = 1.5  # seconds: renewals every 0.5 s


@pytest.fixture
def frames(monkeypatch: Any) -> list[tuple[float, dict[str, Any]]]:
    """Every frame published, with the monotonic time it was handed to the bus."""
    sent: list[tuple[float, dict[str, Any]]] = []
    apublish, publish_many = bus.apublish, bus.publish_many

    async def recording(session_id: str, frame: dict[str, Any]) -> None:
        sent.append((time.monotonic(), frame))
        await apublish(session_id, frame)

    def recording_many(session_id: str, many: list[dict[str, Any]]) -> None:
        sent.extend((time.monotonic(), frame) for frame in many)
        publish_many(session_id, many)

    monkeypatch.setattr(bus, "apublish", recording)
    monkeypatch.setattr(bus, "publish_many", recording_many)
    return sent


def _streamed(frames: list[tuple[float, dict[str, Any]]], after: float = 0.0) -> int:
    return sum(len(f["delta"]) for t, f in frames if f.get("type") == "part.delta" and t >= after)


def _statuses(frames: list[tuple[float, dict[str, Any]]], status: str) -> int:
    return sum(1 for _, f in frames if f.get("type") == "session.status" and f["status"] == status)


async def test_renewals_that_keep_failing_stop_the_turn_before_the_lease_expires(
    settings, monkeypatch, session, agents, frames
):
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.02  # 300 words: 6 s, well past the lease
    settings.FORGE_LEASE_SECONDS = LEASE

    def renew(**_: Any) -> bool:
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(lease, "renew", renew)
    # The lease expires LEASE after the statement that took it, not after the prompt's
    # transaction committed: a transaction slow after taking it (0.2 s of a loaded CI
    # pass, here 0.3 s) made the turn count on its lease past its expiry.
    taken: list[float] = []
    acquire = lease.acquire

    def slowly(**kwargs: Any) -> Any:
        taken.append(time.monotonic())
        expired = acquire(**kwargs)
        time.sleep(0.3)  # twice the margin (0.15 s) the runner keeps
        return expired

    monkeypatch.setattr(lease, "acquire", slowly)
    started = await start_turn(session=session, text=" ".join(["word"] * 300))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, 10)
    ended = time.monotonic()
    [asked_at] = taken
    assert ended - asked_at < LEASE, "the turn ran past its unconfirmed lease"
    assert _streamed(frames, after=asked_at + LEASE) == 0
    # It neither finalized the reply nor gave the lease back: the lease expires, and
    # whoever finds it expired finalizes the reply from what streamed (the mirror).
    reply = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    assert reply["info"]["completed_at"] is None
    assert await database_sync_to_async(SessionLease.objects.filter(session=session).exists)()
    assert _statuses(frames, "idle") == 0
    await asyncio.sleep(LEASE)
    finished = await database_sync_to_async(recover_session)(session)
    assert finished == [started.assistant_message_id]


async def test_one_failed_renewal_is_tolerated(settings, monkeypatch, session, agents, frames):
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.01  # 200 words: 2 s, past the lease
    settings.FORGE_LEASE_SECONDS = LEASE
    renew, failed = lease.renew, list[bool]()

    def once_failing(**kwargs: Any) -> Any:
        if not failed:
            failed.append(True)
            raise OperationalError("the server closed the connection unexpectedly")
        return renew(**kwargs)

    monkeypatch.setattr(lease, "renew", once_failing)
    started = await start_turn(session=session, text=" ".join(["word"] * 200))
    await asyncio.wait_for(started.task, 10)
    assert failed
    reply = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    assert reply["info"]["error"] is None
    text = "".join(p["text"] for p in reply["parts"] if p["type"] == "text")
    assert text == " ".join(["word"] * 200)


async def test_a_runner_frozen_past_its_lease_publishes_nothing_once_it_resumes(
    settings, session, agents, frames, own_redis, monkeypatch
):
    """The process freezes (its event loop blocked, as ``SIGSTOP`` would) past its lease;
    meanwhile another process finds the lease expired and finalizes the reply. Once the
    runner resumes, it sends nothing more of that turn and restores no mirror.

    The freeze starts just after the database has run a renewal, before its answer
    reaches the loop (the database thread is not frozen with the loop): the runner
    took that answer for a fresh lease once it resumed, and restored its mirror (a
    loaded CI pass; the answer is now counted from the expiry it wrote)."""
    import redis

    from tests.faults.test_redis_away import use_redis

    use_redis(settings, own_redis.url)
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.02
    settings.FORGE_LEASE_SECONDS = LEASE
    loop = asyncio.get_running_loop()
    renew, thawed = lease.renew, list[float]()

    def other_process() -> None:  # the janitor of another process, once the lease expired
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            held = SessionLease.objects.filter(session=session).first()
            if held is None or held.expires_at <= timezone.now():
                break
            time.sleep(0.05)
        finished = recover_session(session)
        assert finished == [started.assistant_message_id]

    def freeze() -> None:
        time.sleep(LEASE + 0.2)
        janitor = threading.Thread(target=other_process)
        janitor.start()
        janitor.join()
        thawed.append(time.monotonic())

    def renewed_then_frozen(**kwargs: Any) -> Any:
        expires = renew(**kwargs)
        if not thawed and loop.is_running():
            thawed.append(0.0)  # once: the loop runs the freeze before the answer
            loop.call_soon_threadsafe(freeze)
        return expires

    monkeypatch.setattr(lease, "renew", renewed_then_frozen)
    started = await start_turn(session=session, text=" ".join(["word"] * 300))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, 10)
    await bus.flush()
    assert len(thawed) == 2, "the loop never froze"
    assert _streamed(frames, after=thawed[1]) == 0
    assert _statuses(frames, "idle") <= 1  # the janitor's
    mirrored = redis.Redis.from_url(own_redis.url).keys("*inflight*")
    assert mirrored == []
    reply = await database_sync_to_async(selectors.get_message)(
        tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
    )
    assert reply["info"]["completed_at"] is not None
