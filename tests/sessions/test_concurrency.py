"""Sequence allocation under concurrent writers: no duplicate, no gap, a valid chain."""

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import close_old_connections, connection

from sessions import selectors, services, sql
from sessions.models import Part, Session

WRITERS = 8
PARTS_EACH = 500


def in_own_thread(write: Callable[[], Any]) -> Callable[[], None]:
    """Run ``write`` as a thread's whole life, closing the thread's connection after."""

    def run() -> None:
        try:
            write()
        finally:
            connection.close()

    return run


def _writer(
    session_id: str, message_id: str, n: int, errors: list, barrier: threading.Barrier
) -> None:
    try:
        session = Session.objects.get(pk=session_id)
        barrier.wait()
        for i in range(PARTS_EACH):
            services.update_part(
                session=session,
                part={"message_id": message_id, "type": "text", "text": f"writer {n} part {i}"},
            )
    except Exception as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(600)
def test_concurrent_writers_to_one_session_get_contiguous_seqs_and_a_valid_chain(user):
    session = services.create_session(user=user)
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    errors: list[Exception] = []
    barrier = threading.Barrier(WRITERS)
    threads = [
        threading.Thread(target=_writer, args=(session.pk, message_id, n, errors, barrier))
        for n in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    close_old_connections()
    assert errors == []
    seqs = list(session.events.order_by("seq").values_list("seq", flat=True))
    total = 2 + WRITERS * PARTS_EACH
    assert seqs == list(range(1, total + 1))
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
    assert Part.objects.filter(session=session).count() == WRITERS * PARTS_EACH
    # Each writer's parts are in its own order in the log.
    for n in range(WRITERS):
        texts = [
            data["text"]
            for data in session.events.filter(
                type="part.updated", data__text__startswith=f"writer {n} "
            )
            .order_by("seq")
            .values_list("data", flat=True)
        ]
        assert texts == [f"writer {n} part {i}" for i in range(PARTS_EACH)]


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_write_that_loses_the_race_for_its_seq_retries_and_lands_after_the_winner(
    user, monkeypatch: Any
):
    """The optimistic path: a concurrent writer commits between our read and our write."""
    session = services.create_session(user=user)
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    read_head = sql.read_head
    raced: list[bool] = []
    me = threading.current_thread()

    def read_then_lose_the_race(*args: Any, **kwargs: Any) -> Any:
        head = read_head(*args, **kwargs)
        if not raced and threading.current_thread() is me:
            raced.append(True)
            rival = threading.Thread(
                target=in_own_thread(
                    lambda: services.update_part(
                        session=Session.objects.get(pk=session.pk),
                        part={"message_id": message_id, "type": "text", "text": "rival"},
                    )
                )
            )
            rival.start()
            rival.join()
        return head

    monkeypatch.setattr(sql, "read_head", read_then_lose_the_race)
    mine = services.update_part(
        session=session, part={"message_id": message_id, "type": "text", "text": "mine"}
    )
    assert raced
    assert mine.seq == 4
    texts = list(
        session.events.filter(type="part.updated")
        .order_by("seq")
        .values_list("data__text", flat=True)
    )
    assert texts == ["rival", "mine"]
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_after_repeated_lost_races_the_write_takes_the_lock(user, monkeypatch: Any):
    session = services.create_session(user=user)
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    read_head = sql.read_head
    me = threading.current_thread()
    calls = {"unlocked": 0}

    def always_stale(cursor: Any, dialect: Any, session_id: str, **kwargs: Any) -> Any:
        """Every unlocked read of ours is overtaken by a rival write before we write."""
        head = read_head(cursor, dialect, session_id, **kwargs)
        if threading.current_thread() is me and cursor.db.get_autocommit():
            calls["unlocked"] += 1
            rival = threading.Thread(
                target=in_own_thread(
                    lambda: services.update_message(
                        session=Session.objects.get(pk=session.pk), info={"role": "user"}
                    )
                )
            )
            rival.start()
            rival.join()
        return head

    monkeypatch.setattr(sql, "read_head", always_stale)
    event = services.update_part(
        session=session, part={"message_id": message_id, "type": "text", "text": "finally"}
    )
    assert calls["unlocked"] == services.OPTIMISTIC_ATTEMPTS
    assert event.seq == 3 + services.OPTIMISTIC_ATTEMPTS
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
