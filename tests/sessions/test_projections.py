"""Messages and parts are projections of the log: rebuilding them changes nothing."""

import pytest
from django.core.management import CommandError, call_command

from sessions import selectors
from sessions.models import Message, Part, Session
from sessions.projector import compare

from .script import drive

pytestmark = pytest.mark.django_db


def snapshot() -> dict:
    return {
        "sessions": sorted(Session.objects.values_list("id", "title", "agent")),
        "messages": sorted(
            Message.objects.values_list("id", "tenant_id", "session_id", "role", "data", "seq")
        ),
        "parts": sorted(
            Part.objects.values_list(
                "id", "tenant_id", "session_id", "message_id", "type", "data", "seq"
            )
        ),
    }


@pytest.fixture
def scripted(session):
    drive(session, turns=8)
    return session


def test_the_scripted_session_uses_every_part_type_and_tool_state(scripted):
    logged = [e.data for e in scripted.events.filter(type="part.updated")]
    assert {p["type"] for p in logged} == {
        "text",
        "reasoning",
        "tool",
        "file",
        "agent",
        "compaction",
        "subtask",
        "step-start",
        "step-finish",
        "patch",
    }
    assert {p["state"]["status"] for p in logged if p["type"] == "tool"} == {
        "pending",
        "running",
        "completed",
        "error",
    }
    assert scripted.events.filter(type="part.removed").exists()
    assert scripted.events.filter(type="message.removed").exists()
    assert scripted.events.count() > 150


def test_check_reports_no_difference_after_the_scripted_session(scripted, capsys):
    call_command("rebuild_projections", "--check")
    assert "1 session(s) checked: projections match the log" in capsys.readouterr().out


def test_rebuilt_tables_equal_the_live_ones(scripted, user):
    from sessions.services import create_session

    drive(create_session(user=user, title="second"), turns=1)
    live = snapshot()
    call_command("rebuild_projections")
    assert snapshot() == live


def test_check_finds_a_tampered_projection_and_rebuild_repairs_it(scripted, capsys):
    part = Part.objects.filter(session=scripted, type="text").order_by("id")[0]
    # A row's data is its event's: tamper with the pointer (the event before its own).
    Part.objects.filter(pk=part.pk).update(seq=part.seq - 1)
    message = (
        Message.objects.filter(session=scripted).exclude(pk=part.message_id).order_by("-id")[0]
    )
    Message.objects.filter(pk=message.pk).delete()
    with pytest.raises(CommandError, match="1 of 1 session"):
        call_command("rebuild_projections", "--check")
    out = capsys.readouterr().out
    assert f"part {part.pk}: differs in data, seq" in out
    assert f"message {message.pk}: missing" in out
    call_command("rebuild_projections", "--session", scripted.pk)
    call_command("rebuild_projections", "--check", "--session", scripted.pk)
    assert Part.objects.get(pk=part.pk).data["text"] == part.data["text"]


def test_check_reports_a_title_that_does_not_come_from_the_log(scripted):
    Session.objects.filter(pk=scripted.pk).update(title="edited behind the log's back")
    with pytest.raises(CommandError):
        call_command("rebuild_projections", "--check")


def test_fold_and_stored_projection_agree(scripted):
    expected = selectors.projection_from_log(tenant=scripted.tenant, session=scripted)
    stored = selectors.stored_projection(tenant=scripted.tenant, session=scripted)
    assert compare(expected, stored) == []
    assert len(expected.parts) == Part.objects.filter(session=scripted).count()


def test_unknown_session_is_a_command_error():
    with pytest.raises(CommandError, match="no session"):
        call_command("rebuild_projections", "--session", "ses_missing")
