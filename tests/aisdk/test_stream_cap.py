"""The AI SDK routes at the user's stream limit, through a real daphne (issue 17): every
refusal is a JSON 429 before the stream, and a refused chat prompt writes nothing, no
new chat and no prompt in an existing one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions.models import Session, SessionEvent
from tests.live import daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def chat_body(chat_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        **extra,
    }


def test_at_the_stream_limit_a_chat_prompt_is_refused_before_anything_is_written(
    tmp_path: Path, agents: Any, session: Any, user_message: Any, token: str
) -> None:
    with (
        daphne(tmp_path, FORGE_MAX_STREAMS_PER_USER="1", FORGE_SSE_HEARTBEAT="0.5") as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Token {token}"}, timeout=30
        ) as api,
        api.stream("GET", f"/api/sessions/{session.pk}/stream/") as held,  # the one stream
    ):
        lines = held.iter_lines()  # kept: dropping it would close the connection
        assert next(line for line in lines if line.startswith("id: ")) == "id: 1"
        events = SessionEvent.objects.filter(session=session).count()
        for body in (
            chat_body("a-new-chat"),
            chat_body(session.pk),
            chat_body(session.pk, trigger="regenerate-message"),
        ):
            refused = api.post("/api/chat", json=body)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "too_many_streams"
        assert not Session.objects.filter(pk="a-new-chat").exists()
        assert SessionEvent.objects.filter(session=session).count() == events
        assert next(lines) is not None  # the held stream is still open
