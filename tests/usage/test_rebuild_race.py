"""A reply that completes while ``rebuild_usage`` runs is counted once (a fourth-round
finding: on PostgreSQL, one whose key had no row yet was counted twice, from its own
row and again from the log the rebuild folded after it committed). Real threads, both
engines."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from forge.models import Usage
from forge.usage import services as usage_services
from forge.usage.fold import completes
from forge.usage.services import rebuild_usage, record_reply
from sessions import services
from sessions.services import create_session

from .helpers import now, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def open_reply(session: Any, agent: str) -> dict[str, Any]:
    asked = services.update_message(
        session=session, info={"role": "user", "user_id": session.user_id}
    ).data["id"]
    return services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": asked,
            "agent": agent,
            "model": {"provider": "offline", "model": "echo"},
            "user_id": session.user_id,
        },
    ).data


def test_a_reply_completing_during_a_rebuild_counts_once(user, monkeypatch):
    first = create_session(user=user, title="counted")
    _opened, done = reply(first, steps=[{"tokens": {"input": 10, "output": 2}, "cost": 0}])
    record_reply(session=first, info=done)
    second = create_session(user=user, title="completes during the rebuild")
    opened = open_reply(second, agent="plan")  # another agent: a key with no row yet

    paused, committed = threading.Event(), threading.Event()
    fold = usage_services._fold_session

    def slow_fold(*args: Any) -> Any:
        if not paused.is_set():
            paused.set()
            committed.wait(2)  # without the lock the reply commits meanwhile
        return fold(*args)

    monkeypatch.setattr(usage_services, "_fold_session", slow_fold)

    def rebuild() -> None:
        try:
            rebuild_usage()
        finally:
            connection.close()

    def complete() -> None:
        try:
            paused.wait(10)
            with transaction.atomic():
                step = {"message_id": opened["id"], "type": "step-finish", "reason": "stop"}
                step |= {"tokens": {"input": 7, "output": 1}, "cost": 0}
                services.update_part(session=second, part=step)
                final = {"id": opened["id"], "completed_at": now(), "finish": "stop"}
                finished = services.update_message(session=second, info=final).data
                assert completes(opened, finished)
                record_reply(session=second, info=finished)
            committed.set()
        finally:
            connection.close()

    threads = [threading.Thread(target=rebuild), threading.Thread(target=complete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    counts = dict(Usage.objects.values_list("agent", "turns"))
    assert counts == {"build": 1, "plan": 1}
    assert Usage.objects.get(agent="plan").input_tokens == 7
