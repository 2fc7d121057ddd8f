"""The log is append-only twice over: the ORM refuses, and so does the database."""

import pytest
from django.db import IntegrityError, connection, transaction

from sessions import services
from sessions.exceptions import AppendOnlyError
from sessions.models import SessionEvent

pytestmark = pytest.mark.django_db

TABLE = SessionEvent._meta.db_table


def test_the_orm_refuses_to_change_or_delete_an_event(session):
    event = session.events.get()
    event.type = "session.updated"
    with pytest.raises(AppendOnlyError):
        event.save()
    with pytest.raises(AppendOnlyError):
        event.delete()
    with pytest.raises(AppendOnlyError):
        SessionEvent.objects.filter(session=session).update(type="x")
    with pytest.raises(AppendOnlyError):
        SessionEvent.objects.filter(session=session).delete()
    with pytest.raises(AppendOnlyError):
        SessionEvent.objects.bulk_update([event], ["type"])
    assert session.events.get().type == "session.created"


@pytest.mark.parametrize(
    "statement",
    [
        f"UPDATE {TABLE} SET type = 'session.updated' WHERE session_id = %s",
        f"UPDATE {TABLE} SET data = '{{}}' WHERE session_id = %s",
        f"DELETE FROM {TABLE} WHERE session_id = %s",
    ],
    ids=["update type", "update data", "delete"],
)
def test_the_database_refuses_raw_sql_updates_and_deletes(session, statement):
    before = list(session.events.values_list("seq", "type", "hash"))
    with (
        pytest.raises(IntegrityError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement, [session.pk])
    assert list(session.events.values_list("seq", "type", "hash")) == before


def test_a_trigger_guards_every_engine_we_run_on():
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [TABLE]
            )
        else:
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                [TABLE],
            )
        assert cursor.fetchall()


def test_deleting_the_whole_session_is_still_possible(session, user_message):
    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "x"}
    )
    services.delete_session(session=session)
    assert not SessionEvent.objects.filter(session_id=session.pk).exists()


def test_marking_one_session_deleting_does_not_unlock_another(session, user):
    other = services.create_session(user=user)
    with pytest.raises(IntegrityError), transaction.atomic():
        type(session).objects.filter(pk=session.pk).update(deleting=True)
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE session_id = %s", [other.pk])
    assert other.events.exists()
