"""Projections without copies (migration 0006): a message or part row points at the event
that last wrote it, and reads its data from there. Reads, search, rebuild and the
migration of existing databases must see exactly what the copies held."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sessions import selectors, services
from sessions.models import Message, Part, SessionEvent
from sessions.recall import search_history

from .script import drive, user_turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

APP = "forge_sessions"
BEFORE = (APP, "0005_row_level_security")
PART = Part._meta.db_table
MESSAGE = Message._meta.db_table
EVENT = SessionEvent._meta.db_table


def reads(session: Any) -> dict[str, Any]:
    """Everything a client or the model can read of the projections."""
    tenant = session.tenant
    return {
        "rows": sorted(
            [
                *Message.objects.values_list("id", "role", "data", "seq"),
                *Part.objects.values_list("id", "type", "data", "seq"),
            ]
        ),
        "history": list(selectors.iter_history(tenant=tenant, session_id=session.pk)),
    }


def search(session: Any, query: str) -> list[tuple[str, str]]:
    hits = search_history(tenant=session.tenant, session=session, query=query, limit=50)
    return sorted((hit.message_id, hit.part_id) for hit in hits)


def test_a_row_reads_the_data_of_the_event_it_points_at(session):
    drive(session, turns=3)
    events = {e.seq: e.data for e in SessionEvent.objects.filter(session=session)}
    rows = [*Message.objects.filter(session=session), *Part.objects.filter(session=session)]
    assert len(rows) > 20
    for row in rows:
        assert row.data == events[row.seq]
    # No copy is stored: the tables have no data column any more.
    with connection.cursor() as cursor:
        for table in (MESSAGE, PART):
            description = connection.introspection.get_table_description(cursor, table)
            columns = [c.name for c in description]
            assert "data" not in columns


def test_search_sees_a_part_s_newest_text_only_and_forgets_removed_parts(session):
    message_id = user_turn(session, "the quokka question")
    part_id = Part.objects.get(message_id=message_id).pk
    assert search(session, "quokka") == [(message_id, part_id)]
    services.update_part(session=session, part={"id": part_id, "text": "a wombat instead"})
    assert search(session, "quokka") == []
    assert search(session, "wombat") == [(message_id, part_id)]
    services.remove_part(session=session, part_id=part_id)
    assert search(session, "wombat") == []
    if connection.vendor == "sqlite":  # the external-content index agrees with its content
        with connection.cursor() as cursor:
            fts = f"{PART}_fts"
            cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")


def test_deleting_a_session_leaves_the_search_index_consistent(session, user):
    other = services.create_session(user=user, title="kept")
    kept = user_turn(other, "platypus facts")
    user_turn(session, "platypus opinions")
    services.delete_session(session=session)
    assert [m for m, _ in search(other, "platypus")] == [kept]
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            fts = f"{PART}_fts"
            cursor.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")


def test_rebuild_points_rows_at_the_same_events(session):
    drive(session, turns=2)
    live = reads(session)
    call_command("rebuild_projections", "--session", session.pk)
    assert reads(session) == live
    call_command("rebuild_projections", "--check", "--session", session.pk)


def _migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def test_an_existing_database_migrates_forward_and_reads_the_same(session):
    drive(session, turns=3)
    words = "good"
    before, hits = reads(session), search(session, words)
    exported = list(selectors.export_lines(session=session))
    assert hits
    latest = _latest()
    try:
        _migrate([BEFORE])
        # At 0005 each row holds its own copy, filled back from the log.
        with connection.cursor() as cursor:
            for table in (MESSAGE, PART):
                cursor.execute(
                    f"SELECT count(*), count(p.data) FROM {table} p JOIN {EVENT} e "
                    "ON e.session_id = p.session_id AND e.seq = p.seq"
                )
                total, copied = cursor.fetchone()
                assert total
                assert total == copied
            # ... and hashes are hex text again.
            cursor.execute(f"SELECT hash FROM {EVENT}")
            assert {len(h) for (h,) in cursor.fetchall()} == {64}
        _migrate(latest)
    finally:
        _migrate(latest)
    assert reads(session) == before
    assert search(session, words) == hits
    call_command("rebuild_projections", "--check")
    assert list(selectors.export_lines(session=session)) == exported
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
    user_turn(session, "written after the migration")  # the chain goes on from the head
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_hashes_are_stored_as_raw_bytes_and_read_as_hex(session):
    user_turn(session, "hello")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT hash FROM {EVENT}")
        stored = [bytes(h) for (h,) in cursor.fetchall()]
    assert stored
    assert {len(h) for h in stored} == {32}
    hexes = sorted(SessionEvent.objects.values_list("hash", flat=True))
    assert hexes == sorted(h.hex() for h in stored)
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_a_copy_that_differs_from_its_event_stops_the_migration(session):
    from sessions.migrations import __name__ as package

    diverges = __import__(f"{package}.0006_lean_projections", fromlist=["x"]).ProjectionDiverges
    user_turn(session, "kept as it was")
    latest = _latest()
    try:
        _migrate([BEFORE])
        with connection.cursor() as cursor:
            forged = '{"forged": true}'
            cast = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
            cursor.execute(f"UPDATE {PART} SET data = {cast}", [forged])
        with pytest.raises(diverges, match=f"1 rows of {PART} differ"):
            _migrate(latest)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {PART} SET data = (SELECT e.data FROM {EVENT} e "
                f"WHERE e.session_id = {PART}.session_id AND e.seq = {PART}.seq)"
            )
    finally:
        _migrate(latest)
    assert Part.objects.get(session=session).data["text"] == "kept as it was"


def test_keys_of_projection_data_filter_and_read_through_the_event(session):
    user_id = user_turn(session, "question")
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user_id}
    ).data["id"]
    assert list(Message.objects.filter(data__parent_id=user_id).values_list("id", flat=True)) == [
        reply
    ]
    assert list(Message.objects.filter(data__completed_at=None, role="assistant")) == [
        Message.objects.get(pk=reply)
    ]
    newest = selectors.newest_replies(tenant=session.tenant, session=session, parent_ids=[user_id])
    assert newest == {user_id: reply}
