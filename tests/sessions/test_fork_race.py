"""A fork racing the deletion of its source (QA, MEDIUM).

The fork reads the source's history in batches, each its own snapshot under READ
COMMITTED. It held no lock on the source, so a deletion committed between two
batches left a fork holding the first batch only, answered 201. The fork now holds
the source's row in share mode: the deletion waits for the fork to commit.

The deletion is let go on only once PostgreSQL shows its backend waiting for a lock
(``pg_stat_activity``), or once it is over: the race is the one meant, not a timing
guess."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.models import Message, Session

DONE = "2026-11-30T00:00:01.000Z"


def _exchanges(session: Any, n: int) -> None:
    for _ in range(n):
        asked = services.update_message(session=session, info={"role": "user"}).data["id"]
        services.update_part(
            session=session, part={"message_id": asked, "type": "text", "text": "q"}
        )
        services.update_message(
            session=session, info={"role": "assistant", "parent_id": asked, "completed_at": DONE}
        )


def _waiting_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres_only
@pytest.mark.timeout(60)
def test_a_deletion_waits_for_a_fork_of_its_session(session: Any, monkeypatch) -> None:
    from forge import runtime

    _exchanges(session, 3)
    last = services.update_message(session=session, info={"role": "user"}).data["id"]
    original = selectors.iter_history
    forking, go = threading.Event(), threading.Event()

    def one_by_one(**kwargs: Any) -> Iterator[dict[str, Any]]:
        """The history one message a batch (a long history, in short), pausing after
        the first until the deletion has run or waits."""
        for index, item in enumerate(original(**{**kwargs, "batch": 1})):
            yield item
            if index == 0:
                forking.set()
                assert go.wait(30)

    monkeypatch.setattr(selectors, "iter_history", one_by_one)
    outcome: dict[str, Any] = {}

    def fork() -> None:
        try:
            outcome["fork"] = services.fork_session(
                session=session, user=session.user, before_message_id=last
            )
        except NotFound as exc:
            outcome["fork"] = exc
        finally:
            forking.set()
            connections.close_all()

    def delete() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            outcome["ready"].set()
            runtime.delete_session(session=session)
            outcome["deleted"] = True
        finally:
            connections.close_all()

    outcome["ready"] = threading.Event()
    forker = threading.Thread(target=fork)
    forker.start()
    assert forking.wait(30)
    deleter = threading.Thread(target=delete)
    deleter.start()
    assert outcome["ready"].wait(30)
    while deleter.is_alive() and not _waiting_for_a_lock(outcome["pid"]):
        pass
    go.set()
    forker.join(30)
    deleter.join(30)
    assert outcome.get("deleted") is True
    assert not Session.objects.filter(pk=session.pk).exists()
    fork = outcome["fork"]
    assert isinstance(fork, Session), fork
    assert Message.objects.filter(session=fork).count() == 6  # the whole history before


@pytest.mark.django_db
def test_a_fork_of_a_deleted_session_is_not_found_and_writes_nothing(session: Any) -> None:
    _exchanges(session, 1)
    last = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.delete_session(session=session)
    with pytest.raises(NotFound):
        services.fork_session(session=session, user=session.user, before_message_id=last)
    assert not Session.objects.exists()


def test_remap_ids_renames_nested_and_missing_ids() -> None:
    """``remap_ids`` renames a tool's ``output_file.part_id`` (its stored output's part)
    and moves a ``tail_start_id`` whose message was not copied to the copy of the
    first message after it."""
    from sessions.services.transfer import remap_ids

    new_ids = {"msg_b": "msg_y", "msg_c": "msg_z", "prt_a": "prt_x"}
    tool: dict[str, Any] = {
        "id": "prt_t",
        "state": {"metadata": {"output_file": {"part_id": "prt_a"}}},
    }
    assert remap_ids(tool, new_ids)["state"]["metadata"]["output_file"] == {"part_id": "prt_x"}
    assert tool["state"]["metadata"]["output_file"] == {"part_id": "prt_a"}  # not changed
    assert remap_ids({"tail_start_id": "msg_a"}, new_ids) == {"tail_start_id": "msg_y"}
    assert remap_ids({"tail_start_id": "msg_c"}, new_ids) == {"tail_start_id": "msg_z"}
