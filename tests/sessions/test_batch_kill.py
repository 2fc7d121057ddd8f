"""A batch is all or nothing even when its process dies: ``kill -9`` of a real process
in the middle of ``append_batch`` leaves the log as it was (the same seqs, a chain that
verifies, projections equal to the log's), and one killed after the commit leaves all
of it. Both engines: SQLite runs the batch's statements one at a time, so the kill
lands between two of them; PostgreSQL has run them all, uncommitted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sessions import selectors, services
from sessions.models import Message, Part, SessionEvent
from sessions.projector import compare
from tests.live import server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def kill_batch(session: Any, message_id: str, part_id: str, where: str) -> dict[str, list[str]]:
    """Run the batch in a process, kill it with SIGKILL where it paused; its ids."""
    process = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("batch_process.py")),
            session.pk,
            message_id,
            part_id,
            where,
        ],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.strip() == "paused":
                break
        else:
            raise AssertionError("the batch process ended without pausing:\n" + "".join(lines))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == -signal.SIGKILL
    return json.loads(next(line for line in lines if line.startswith("{")))


def state(session: Any) -> dict[str, Any]:
    return {
        "events": list(
            SessionEvent.objects.filter(session=session)
            .order_by("seq")
            .values_list("seq", "id", "hash")
        ),
        "messages": sorted(Message.objects.filter(session=session).values_list("id", "data")),
        "parts": sorted(Part.objects.filter(session=session).values_list("id", "data")),
    }


def consistent(session: Any) -> None:
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
    expected = selectors.projection_from_log(tenant=session.tenant, session=session)
    assert (
        compare(expected, selectors.stored_projection(tenant=session.tenant, session=session)) == []
    )


@pytest.fixture
def stored(session: Any) -> tuple[str, str]:
    message = services.update_message(session=session, info={"role": "user"}).data["id"]
    part = services.update_part(
        session=session, part={"message_id": message, "type": "text", "text": "before"}
    ).data["id"]
    return message, part


def test_kill_9_in_the_middle_of_a_batch_leaves_nothing_of_it(session, stored):
    message, part = stored
    before = state(session)
    ids = kill_batch(session, message, part, "midway")
    assert state(session) == before
    assert not Message.objects.filter(pk__in=ids["messages"]).exists()
    assert not Part.objects.filter(pk__in=ids["parts"]).exists()
    assert Part.objects.get(pk=part).data["text"] == "before"
    consistent(session)
    # The dead process's lock went with it: the log takes the next write at once.
    event = services.update_part(
        session=session, part={"message_id": message, "type": "text", "text": "after"}
    )
    assert event.seq == before["events"][-1][0] + 1
    consistent(session)


def test_kill_9_after_a_batch_committed_leaves_all_of_it(session, stored):
    message, part = stored
    before = state(session)
    ids = kill_batch(session, message, part, "committed")
    after = state(session)
    head = before["events"][-1][0]
    assert [seq for seq, _, _ in after["events"]] == list(range(1, head + 8))
    assert after["events"][:head] == before["events"]
    assert set(Message.objects.filter(session=session).values_list("id", flat=True)) == set(
        ids["messages"]
    )  # the stored message was removed by the batch, with its part
    parts = Part.objects.filter(session=session).order_by("id")
    assert list(parts.values_list("id", flat=True)) == ids["parts"]
    consistent(session)
