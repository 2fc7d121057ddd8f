"""POST /api/sessions/{id}/compact/: 202, then the boundary; 400 empty, 409 busy."""

from __future__ import annotations

from typing import Any

import pytest

from forge.runtime import lease
from sessions import selectors, services
from sessions.models import SessionEvent

from .conftest import error

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

DONE = "2026-11-30T00:00:01.000Z"


def _exchange(session: Any, n: int) -> None:
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": user, "type": "text", "text": f"question {n}"}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user, "completed_at": DONE}
    ).data["id"]
    services.update_part(
        session=session, part={"message_id": reply, "type": "text", "text": f"answer {n}"}
    )


def test_compact_then_the_context_carries_the_summary(api, session, agents, settings):
    settings.FORGE_SMALL_MODEL = "offline/echo"
    settings.FORGE_COMPACT_TAIL_TOKENS = 10
    for n in range(3):
        _exchange(session, n)
    response = api.post(f"/api/sessions/{session.pk}/compact/")
    assert response.status_code == 202, response.content
    assert response.json()["compacting"] is True
    assert SessionEvent.objects.filter(session=session, type="session.compacted").count() == 1
    context = api.get(f"/api/sessions/{session.pk}/context/").json()
    texts = [m["content"] for m in context["messages"]]
    assert "question 0" not in texts
    assert any("## Goal" in t for t in texts)
    messages = api.get(f"/api/sessions/{session.pk}/messages/?limit=200").json()
    assert len(messages["results"]) == 8  # every turn, plus the compaction and its summary


def test_compact_an_empty_session_is_400(api, session, agents):
    response = api.post(f"/api/sessions/{session.pk}/compact/")
    assert response.status_code == 400
    assert error(response)["code"] == "nothing_to_compact"
    assert selectors.head_seq(tenant=session.tenant, session_id=session.pk) == 1


def test_compact_a_busy_session_is_409(api, session, agents):
    _exchange(session, 0)
    head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    lease.acquire(session=session, message_id="msg_running")
    response = api.post(f"/api/sessions/{session.pk}/compact/")
    assert response.status_code == 409
    assert error(response)["code"] == "busy"
    assert selectors.head_seq(tenant=session.tenant, session_id=session.pk) == head


def test_compact_another_tenants_session_is_404(stranger, session, agents):
    assert stranger.post(f"/api/sessions/{session.pk}/compact/").status_code == 404


def test_a_prompt_refused_by_a_dead_holders_live_lease_says_when_to_try_again(api, session, agents):
    """QA (LOW): for up to a lease period after its process died, every prompt, answer
    and deletion was a bare 409 ``busy``, while an abort said when to retry. A live
    holder's turn ends when it ends: no hint then."""
    import datetime as dt

    from django.utils import timezone

    from forge.models import SessionLease

    lease.acquire(session=session, message_id="msg_running")
    live = api.post(f"/api/sessions/{session.pk}/messages/", {"text": "hi"}, format="json")
    assert live.status_code == 409
    assert "Retry-After" not in live
    assert "retry_after" not in error(live)
    now = timezone.now()
    SessionLease.objects.filter(session=session).update(
        owner="dead-host:1:x",
        heartbeat_at=now - dt.timedelta(seconds=14),
        expires_at=now + dt.timedelta(seconds=1),
    )
    for response in (
        api.post(f"/api/sessions/{session.pk}/messages/", {"text": "hi"}, format="json"),
        api.delete(f"/api/sessions/{session.pk}/"),
    ):
        assert response.status_code == 409
        assert error(response)["code"] == "busy"
        assert 1 <= error(response)["retry_after"] <= 2
        assert response["Retry-After"] == str(error(response)["retry_after"])
