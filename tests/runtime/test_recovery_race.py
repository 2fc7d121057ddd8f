"""Two janitors that find one dead runner's turn at once finalize it once (a fourth-round
finding: two daphnes' janitors, ticking together, both completed the reply, and the
second overwrote the streamed text the first had kept with ""). Real threads, both
engines."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from forge.models import SessionLease
from forge.runtime import finalize, recovery
from sessions import services
from sessions.models import SessionEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_two_janitors_finalize_a_dead_turn_once(session, monkeypatch):
    asked = services.update_message(session=session, info={"role": "user"}).data["id"]
    reply = services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": asked,
            "agent": "build",
            "model": {"provider": "offline", "model": "echo"},
        },
    ).data
    services.update_part(
        session=session,
        part={"message_id": reply["id"], "type": "text", "text": "what had streamed"},
    )
    past = timezone.now() - timedelta(seconds=30)
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="dead-host:1:x",
        message_id=reply["id"],
        acquired_at=past,
        heartbeat_at=past,
        expires_at=past,
    )
    real = finalize.finalize_open_messages

    def slow(**kwargs: Any) -> list[str]:
        time.sleep(0.3)  # both janitors inside at once, were nothing to keep them apart
        return real(**kwargs)

    monkeypatch.setattr(recovery, "finalize_open_messages", slow)
    barrier = threading.Barrier(2)
    results: list[list[str]] = []

    def janitor() -> None:
        try:
            barrier.wait()
            results.append(recovery.recover_session(session))
        finally:
            connection.close()

    threads = [threading.Thread(target=janitor) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(len(found) for found in results) == [0, 1]
    completions = [
        e.data
        for e in SessionEvent.objects.filter(session=session, type="message.updated")
        if e.data.get("id") == reply["id"] and e.data.get("completed_at")
    ]
    assert len(completions) == 1
    assert not SessionLease.objects.exists()
