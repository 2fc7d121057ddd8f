"""``kill -9`` of a real daphne mid-reply, then an immediate restart: the new process's
janitor finalizes the reply once the dead runner's lease expires, without any new
prompt, keeping the text that had streamed when the in-flight mirror (Redis) has it.
(Finding 5 of the reliability issue: the janitor started only with a process's
first turn, so such a reply stayed open until the next prompt.)"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings

from sessions.models import Message, Part
from tests.live import daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

LEASE = 2.0


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


SCRIPT = [
    [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Half of "},
        {"type": "text-delta", "id": "t", "delta": "an answer"},
        {"type": "sleep", "seconds": 120},
        {"type": "text-end", "id": "t"},
        {"type": "finish-step", "finish_reason": "stop"},
    ]
]


@pytest.mark.parametrize("survivor", ["restarted", "already serving"])
def test_a_reply_cut_by_kill_9_is_finalized_by_another_process(
    tmp_path: Path, session: Any, token: str, agents: Any, survivor: str
) -> None:
    """``restarted``: the killed process is replaced right after the kill; ``already
    serving``: two processes serve, one is killed mid-reply, the other finishes it."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {
        "FORGE_MODEL": "offline/script",
        "FORGE_SCRIPT": str(script),
        "FORGE_LEASE_SECONDS": str(LEASE),
        "FORGE_LEASE_JANITOR": "1",
        "FORGE_RECOVER_ON_START": "1",
    }
    with contextlib.ExitStack() as servers:
        if survivor == "already serving":
            other = servers.enter_context(daphne(tmp_path, "other", **env))
        with daphne(tmp_path, "first", **env) as first:
            answer = httpx.post(
                f"{first.url}/api/sessions/{session.pk}/messages/",
                json={"text": "go"},
                headers={"Authorization": f"Token {token}"},
                timeout=10,
            )
            assert answer.status_code == 202, answer.text
            reply_id = answer.json()["assistant_message_id"]
            _wait(
                lambda: Part.objects.filter(message_id=reply_id, data__type="text").exists(),
                30,
                "the reply's text part",
            )
            time.sleep(0.5)  # the deltas reach the in-flight mirror
            os.killpg(first.process.pid, signal.SIGKILL)
            first.process.wait(10)
        killed_at = time.monotonic()
        if survivor == "restarted":
            other = servers.enter_context(daphne(tmp_path, "other", **env))
        # No prompt, no request to the session: only a janitor can finish it.
        _wait(
            lambda: Message.objects.get(pk=reply_id).data["completed_at"] is not None,
            LEASE * 2 + 10,
            "the janitor to finalize the reply",
        )
        assert time.monotonic() - killed_at < LEASE * 2 + 10
        reply = Message.objects.get(pk=reply_id).data
        assert reply["error"]["name"] == "MessageAbortedError"
        text = Part.objects.get(message_id=reply_id, data__type="text").data
        assert text["time"]["end"]
        # With Redis the streamed text survives the crash; without it, the log's (empty) text.
        assert text["text"] == ("Half of an answer" if settings.REDIS_URL else "")
        assert "Traceback" not in other.output()
