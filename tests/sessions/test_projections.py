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


@pytest.mark.parametrize("session_id", ["ses_missing", ""])
def test_unknown_session_is_a_command_error(scripted, session_id):
    """An empty id names no session: it rebuilt every session (QA)."""
    with pytest.raises(CommandError, match="no session"):
        call_command("rebuild_projections", "--session", session_id)


@pytest.mark.sqlite_only
@pytest.mark.django_db(transaction=True)
def test_rebuild_over_many_sessions_while_another_process_writes(user, monkeypatch, capsys):
    """More sessions than one read batch, and another connection committing while the
    rebuild runs (a server serving prompts): every session is rebuilt. The sessions were
    read through an open cursor, whose stale read snapshot made the next session's
    ``BEGIN IMMEDIATE`` fail at once with "database is locked"."""
    import sqlite3

    from django.db import connection

    from sessions import services
    from sessions.management.commands import rebuild_projections

    monkeypatch.setattr(rebuild_projections, "BATCH", 50)
    for n in range(205):  # more than a batch of Django's iterator() too
        services.create_session(user=user, title=f"chat {n}")
    rebuild = services.rebuild_projection
    calls = []

    def rebuild_while_another_writes(**kwargs):
        calls.append(kwargs["session"].pk)
        with sqlite3.connect(connection.settings_dict["NAME"], timeout=5) as other:
            other.execute("UPDATE forge_sessions_session SET title = hex(randomblob(4))")
        return rebuild(**kwargs)

    monkeypatch.setattr(services, "rebuild_projection", rebuild_while_another_writes)
    call_command("rebuild_projections")
    assert len(calls) == len(set(calls)) == 205
    assert "rebuilt 205 session(s)" in capsys.readouterr().out


def test_ctrl_c_ends_rebuild_with_a_message_not_a_traceback(scripted, monkeypatch):
    from sessions import services

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(services, "rebuild_projection", interrupted)
    with pytest.raises(CommandError, match=r"interrupted after 0 of 1 session\(s\).*run it again"):
        call_command("rebuild_projections")
    # A check changes nothing: it said "rebuilt … run it again" too (QA).
    monkeypatch.setattr(selectors, "verify_log", interrupted)
    with pytest.raises(CommandError, match=r"after checking 0 of 1 session\(s\); nothing was"):
        call_command("rebuild_projections", "--check")


def test_an_imported_copy_appended_in_batches_projects_as_its_source(scripted, user, monkeypatch):
    """An import's copy appends its events in batches (``COPY_BATCH``): batch bounds fall
    anywhere in the log (a message and its parts, a removal, a rename, a compaction),
    and the copy's rows are still what its log projects, its history the source's."""
    from sessions import services
    from sessions.services import transfer

    monkeypatch.setattr(transfer, "COPY_BATCH", 3)
    lines = list(selectors.export_lines(session=scripted))
    copy = services.import_log(user=user, events=services.parse_log(lines), copy=True)
    tenant = scripted.tenant
    assert (
        compare(
            selectors.projection_from_log(tenant=tenant, session=copy),
            selectors.stored_projection(tenant=tenant, session=copy),
        )
        == []
    )
    assert selectors.verify_log(tenant=tenant, session=copy) == []

    def shape(session):
        return [
            (item["info"]["role"], [(p["type"], p.get("text")) for p in item["parts"]])
            for item in selectors.iter_history(tenant=tenant, session_id=session.pk)
        ]

    assert shape(copy) == shape(scripted)
    assert len(list(selectors.export_lines(session=copy))) == len(lines)


def test_an_interrupted_rebuild_says_how_many_sessions_it_finished(user, monkeypatch):
    """With stderr no terminal (cron, a pipe) the progress bar is off and counts nothing:
    an interrupted run said "after 0 of N" whatever it had done (QA)."""
    from sessions import services
    from sessions.services import create_session

    for n in range(4):
        create_session(user=user, title=f"chat {n}")
    rebuild, calls = services.rebuild_projection, []

    def interrupted_at_the_third(**kwargs):
        calls.append(kwargs["session"].pk)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return rebuild(**kwargs)

    monkeypatch.setattr(services, "rebuild_projection", interrupted_at_the_third)
    with pytest.raises(CommandError, match="interrupted after 2 of 4 session") as refused:
        call_command("rebuild_projections")
    assert refused.value.returncode == 130
