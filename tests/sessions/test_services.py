"""The one write entry (CONTRACT §6): every call appends one event, projects it, publishes it."""

import re
from typing import Any

import pytest

from sessions import selectors, services
from sessions.exceptions import InvalidEvent, InvalidMessage, InvalidPart, NotFound, SessionMismatch
from sessions.models import Message, Part, Session, SessionEvent

pytestmark = pytest.mark.django_db


def log_of(session: Any) -> list[tuple[int, str]]:
    return list(session.events.order_by("seq").values_list("seq", "type"))


def test_create_session_logs_session_created_in_the_users_tenant(user, tenant):
    session = services.create_session(user=user, title="  Hello  ", agent="build")
    assert session.tenant == tenant
    assert session.title == "Hello"
    assert log_of(session) == [(1, "session.created")]
    created = session.events.get()
    assert created.data == {
        "id": session.pk,
        "title": "Hello",
        "agent": "build",
        "parent_id": None,
        "created_at": created.data["created_at"],
    }
    assert created.tenant_id == tenant.pk


def test_create_session_refuses_a_tenant_the_user_is_not_in(user, other_user):
    foreign = other_user.memberships.get().tenant
    with pytest.raises(SessionMismatch):
        services.create_session(user=user, tenant=foreign)
    assert not Session.objects.exists()


def test_writes_append_contiguous_events_and_project_them(session):
    message = services.update_message(session=session, info={"role": "user"})
    part = services.update_part(
        session=session, part={"message_id": message.data["id"], "type": "text", "text": "hi"}
    )
    assert (message.seq, part.seq) == (2, 3)
    assert part.type == "part.updated"
    assert log_of(session) == [(1, "session.created"), (2, "message.updated"), (3, "part.updated")]
    row = Part.objects.get(pk=part.data["id"])
    assert row.data == part.data
    assert row.seq == 3
    assert row.message_id == message.data["id"]
    assert row.tenant_id == session.tenant_id
    assert Message.objects.get(pk=message.data["id"]).data == message.data
    stored = SessionEvent.objects.get(session=session, seq=3)
    assert (stored.id, stored.hash, stored.data) == (part.id, part.hash, part.data)


def test_an_update_replaces_the_part_and_keeps_omitted_fields(session, user_message):
    first = services.update_part(
        session=session,
        part={"message_id": user_message["id"], "type": "text", "text": "", "synthetic": True},
    )
    second = services.update_part(session=session, part={"id": first.data["id"], "text": "done"})
    assert second.data == {**first.data, "text": "done"}
    assert Part.objects.get(pk=first.data["id"]).data["synthetic"] is True
    assert Part.objects.count() == 1


def test_a_whole_tool_lifecycle_is_logged_state_by_state(session, user_message):
    base = {"message_id": user_message["id"], "type": "tool", "call_id": "c1", "tool": "read_file"}
    part_id = services.update_part(session=session, part={**base, "state": {"status": "pending"}})
    part_id = part_id.data["id"]
    t0, t1 = "2026-11-30T00:00:00.000Z", "2026-11-30T00:00:01.500Z"
    services.update_part(
        session=session,
        part={
            "id": part_id,
            "state": {"status": "running", "input": {"p": 1}, "time": {"start": t0}},
        },
    )
    services.update_part(
        session=session,
        part={
            "id": part_id,
            "state": {
                "status": "completed",
                "input": {"p": 1},
                "output": "ok",
                "title": "read",
                "metadata": {},
                "time": {"start": t0, "end": t1},
            },
        },
    )
    statuses = [
        e.data["state"]["status"]
        for e in session.events.filter(type="part.updated").order_by("seq")
    ]
    assert statuses == ["pending", "running", "completed"]
    assert Part.objects.get(pk=part_id).data["state"]["time"] == {
        "start": t0,
        "end": t1,
        "compacted": None,
    }


def _nothing_written(session: Any, before: int, callbacks: list) -> None:
    assert session.events.count() == before
    assert callbacks == []


BAD_PARTS = [
    ({"type": "poem", "text": "x"}, InvalidPart, "part.type"),
    ({"type": "text"}, InvalidPart, "part.text: required"),
    ({"type": "text", "text": 1}, InvalidPart, "expected a string"),
    ({"type": "tool", "call_id": "c", "tool": "t", "state": {}}, InvalidPart, "status"),
    ({"type": "text", "text": "x", "extra": 1}, InvalidPart, "unknown field"),
]


@pytest.mark.parametrize(("fields", "error", "message"), BAD_PARTS)
def test_bad_parts_raise_and_write_nothing(
    session, user_message, django_capture_on_commit_callbacks, fields, error, message
):
    before = session.events.count()
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(error, match=message):
        services.update_part(session=session, part={"message_id": user_message["id"], **fields})
    _nothing_written(session, before, callbacks)
    assert not Part.objects.exists()


def test_a_part_for_a_message_of_another_session_is_refused(
    session, user, django_capture_on_commit_callbacks
):
    other = services.create_session(user=user)
    foreign_message = services.update_message(session=other, info={"role": "user"}).data["id"]
    before = session.events.count()
    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(SessionMismatch):
        services.update_part(
            session=session, part={"message_id": foreign_message, "type": "text", "text": "x"}
        )
    _nothing_written(session, before, callbacks)
    assert not Part.objects.exists()


def test_a_part_of_another_session_cannot_be_updated_through_this_one(session, user):
    other = services.create_session(user=user)
    message_id = services.update_message(session=other, info={"role": "user"}).data["id"]
    part = services.update_part(
        session=other, part={"message_id": message_id, "type": "text", "text": "theirs"}
    ).data
    with pytest.raises(SessionMismatch):
        services.update_part(session=session, part={**part, "session_id": session.pk})
    assert Part.objects.get(pk=part["id"]).data["text"] == "theirs"


def test_a_part_for_a_missing_message_is_refused(session):
    with pytest.raises(InvalidPart, match="no message"):
        services.update_part(
            session=session, part={"message_id": "msg_nope", "type": "text", "text": "x"}
        )
    assert session.events.count() == 1


def test_a_tool_state_going_backwards_is_refused(
    session, user_message, django_capture_on_commit_callbacks
):
    t = {"start": "2026-11-30T00:00:00.000Z", "end": "2026-11-30T00:00:01.000Z"}
    done = services.update_part(
        session=session,
        part={
            "message_id": user_message["id"],
            "type": "tool",
            "call_id": "c",
            "tool": "t",
            "state": {"status": "completed", "input": {}, "output": "o", "time": t},
        },
    ).data
    before = session.events.count()
    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(InvalidPart, match="cannot go from completed to running"),
    ):
        services.update_part(
            session=session,
            part={
                "id": done["id"],
                "state": {"status": "running", "input": {}, "time": {"start": t["start"]}},
            },
        )
    _nothing_written(session, before, callbacks)
    assert Part.objects.get(pk=done["id"]).data["state"]["status"] == "completed"


def test_bad_messages_raise_and_write_nothing(session, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(InvalidMessage, match="role"):
            services.update_message(session=session, info={"role": "robot"})
        with pytest.raises(InvalidMessage, match="parent_id"):
            services.update_message(
                session=session, info={"role": "assistant", "parent_id": "msg_x"}
            )
        with pytest.raises(InvalidMessage, match="info"):
            services.update_message(session=session, info="not a dict")  # type: ignore[arg-type]
    _nothing_written(session, 1, callbacks)
    assert not Message.objects.exists()


def test_an_assistant_message_names_its_parent(session, user_message):
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user_message["id"]}
    ).data
    finished = services.update_message(
        session=session, info={"id": reply["id"], "finish": "stop", "cost": 0.25}
    ).data
    assert finished["parent_id"] == user_message["id"]
    assert finished["created_at"] == reply["created_at"]
    assert (finished["finish"], finished["cost"]) == ("stop", 0.25)


def test_committed_writes_publish_one_frame_each(session, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        services.update_message(session=session, info={"role": "user"})
    assert len(callbacks) == 1


def test_remove_part_and_message(session, user_message):
    part = services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "x"}
    ).data
    removed = services.remove_part(session=session, part_id=part["id"])
    assert removed.type == "part.removed"
    assert removed.data == {
        "session_id": session.pk,
        "message_id": user_message["id"],
        "part_id": part["id"],
    }
    assert not Part.objects.exists()
    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "y"}
    )
    services.remove_message(session=session, message_id=user_message["id"])
    assert not Message.objects.exists()
    assert not Part.objects.exists()
    with pytest.raises(NotFound):
        services.remove_message(session=session, message_id=user_message["id"])
    with pytest.raises(NotFound):
        services.remove_part(session=session, part_id="prt_missing")


def test_an_open_reply_its_prompt_and_its_parts_are_not_removed(session, user_message):
    """QA (MEDIUM): removing the prompt of a running reply, or of one waiting for an
    approval, crashed the turn at its completion and left a log that import refuses (a
    reply whose parent is gone); removing the streaming reply crashed its next write.
    While a reply is open (``completed_at`` null) neither it, its parts nor its prompt
    is removed: 409 ``reply_open``, nothing written. Once it is complete, they are."""
    from sessions.exceptions import ReplyOpen

    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "q"}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user_message["id"]}
    ).data
    part = services.update_part(
        session=session, part={"message_id": reply["id"], "type": "text", "text": "a"}
    ).data
    before = session.events.count()
    for remove in (
        lambda: services.remove_message(session=session, message_id=user_message["id"]),
        lambda: services.remove_message(session=session, message_id=reply["id"]),
        lambda: services.remove_part(session=session, part_id=part["id"]),
    ):
        with pytest.raises(ReplyOpen) as refused:
            remove()
        assert refused.value.status == 409
    assert session.events.count() == before
    services.update_message(
        session=session, info={"id": reply["id"], "completed_at": "2026-12-07T08:00:00.000Z"}
    )
    services.remove_part(session=session, part_id=part["id"])
    services.remove_message(session=session, message_id=user_message["id"])


def test_rename_is_logged(session):
    event = services.update_session(session=session, title="Renamed")
    assert event.type == "session.updated"
    assert event.data["title"] == "Renamed"
    session.refresh_from_db()
    assert session.title == "Renamed"
    with pytest.raises(InvalidEvent, match="longer than"):
        services.update_session(session=session, title="x" * 300)


def test_append_event_is_for_projectionless_types_only(session):
    event = services.append_event(session=session, type="context.updated", data={"blocks": []})
    assert event.seq == 2
    with pytest.raises(InvalidEvent, match="cannot be appended directly"):
        services.append_event(session=session, type="part.updated", data={})


@pytest.mark.parametrize(
    ("type", "data", "message"),
    [
        ("context.updated", {"blocks": None}, "data.blocks"),
        ("context.updated", {"blocks": [{"kind": ""}]}, "data.blocks[0].kind"),
        ("context.updated", {"blocks": [{"kind": "tools", "tools": [{"name": "x"}]}]}, "tools[0]"),
        ("context.updated", {"blocks": [{"kind": "system", "text": ["x"]}]}, "text"),
        ("context.updated", {"blocks": [{"kind": "memo", "removed": "yes"}]}, "removed"),
        ("session.compacted", {"message_id": "msg_1", "parent_id": None}, "parent_id"),
        ("session.compacted", {"message_id": "msg_1", "parent_id": "msg_2", "at": 1}, "unknown"),
    ],
)
def test_append_event_refuses_data_its_readers_cannot_fold(session, type, data, message):
    """The context fold and the compaction plan read these events' data every turn: a
    malformed one, logged, broke the session for good. Nothing is written."""
    with pytest.raises(InvalidEvent, match=re.escape(message)):
        services.append_event(session=session, type=type, data=data)
    assert selectors.log_head(tenant=session.tenant, session=session)[0] == 1
    block = {"kind": "memo", "key": "k", "text": "x", "extra": {"any": ["json"]}}
    assert services.append_event(session=session, type="context.updated", data={"blocks": [block]})


def test_delete_session_removes_the_whole_log_and_nothing_else(session, user, user_message):
    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "x"}
    )
    keep = services.create_session(user=user)
    services.update_message(session=keep, info={"role": "user"})
    services.delete_session(session=session)
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not SessionEvent.objects.filter(session_id=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()
    assert SessionEvent.objects.filter(session=keep).count() == 2
    with pytest.raises(NotFound):
        services.delete_session(session=session)


def test_writes_to_a_deleted_session_are_refused(session):
    services.delete_session(session=session)
    with pytest.raises(NotFound):
        services.update_message(session=session, info={"role": "user"})
