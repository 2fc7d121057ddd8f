"""A burst of prompts on a fresh daphne does not run its database pool dry.

A QA finding (HIGH): a synchronous view (``POST …/messages/?wait=1``, and every other
view that starts or answers a turn) held its thread's pooled connection while it waited
for the runtime, whose database work runs on a thread of its own that needs one more.
On a fresh process, ~10 prompts at once (pool 8) held every connection while the
runtime's thread waited for one: prompts failed after 30 s with "couldn't get a
connection", or hung, and turns were left to the janitor. A warm process passed (its
runtime thread already held a connection). The views now give their connections back
before they wait on the runtime.

PostgreSQL only: SQLite has no pool (each thread opens its own connection).
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from sessions import services
from tests.live import daphne

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.postgres_only,  # SQLite has no pool
]

PROMPTS = 8
POOL = 2


def test_a_burst_of_waiting_prompts_on_a_fresh_daphne_all_finish(
    tmp_path: Path, user: Any, token: str, agents: Any
) -> None:
    assert connection.vendor == "postgresql"
    sessions = [services.create_session(user=user, title=f"burst {n}") for n in range(PROMPTS)]
    auth = {"Authorization": f"Token {token}"}
    with daphne(tmp_path, FORGE_DB_POOL=str(POOL), FORGE_ECHO_DELAY="0.05") as live:

        def send(session_id: str) -> tuple[int, float]:
            started = time.monotonic()
            response = httpx.post(
                f"{live.url}/api/sessions/{session_id}/messages/?wait=1",
                json={"text": "one two three four five six seven eight nine ten"},
                headers=auth,
                timeout=120,
            )
            return response.status_code, time.monotonic() - started

        with concurrent.futures.ThreadPoolExecutor(PROMPTS) as pool:
            answers = list(pool.map(send, [s.pk for s in sessions]))
        output = live.output()
    assert [status for status, _ in answers] == [200] * PROMPTS, output[-3000:]
    assert max(seconds for _, seconds in answers) < 25, answers  # not a pool timeout
    assert "couldn't get a connection" not in output
