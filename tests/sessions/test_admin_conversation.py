"""An operator reads a session's conversation in the admin: roles, text, tool calls with
their inputs and outputs, errors; paged; escaped; scoped to the operator's tenant."""

import pytest
from django.urls import reverse

from sessions import services

from .script import now, user_turn

pytestmark = pytest.mark.django_db


def _reply(session, parent_id, text, **info):
    message_id = services.update_message(
        session=session, info={"role": "assistant", "parent_id": parent_id, **info}
    ).data["id"]
    if text:
        services.update_part(
            session=session, part={"message_id": message_id, "type": "text", "text": text}
        )
    return message_id


@pytest.fixture
def chat(session):
    asked = user_turn(session, "What is in <notes>?")
    reply = _reply(session, asked, "")
    start = now()
    services.update_part(
        session=session,
        part={"message_id": reply, "type": "reasoning", "text": "Look at the file first."},
    )
    for call, status in (("call_ok", "completed"), ("call_bad", "error")):
        state = {"status": status, "input": {"path": f"{call}.txt"}}
        state["time"] = {"start": start, "end": now()}
        if status == "completed":
            state["output"] = "line one\nline two"
        else:
            state["error"] = "no such file: call_bad.txt"
        services.update_part(
            session=session,
            part={
                "message_id": reply,
                "type": "tool",
                "call_id": call,
                "tool": "read_file",
                "state": state,
            },
        )
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "step-finish",
            "reason": "stop",
            "tokens": {"input": 120, "output": 30},
            "cost": 0.25,
        },
    )
    services.update_part(
        session=session, part={"message_id": reply, "type": "text", "text": "Two lines."}
    )
    services.update_message(
        session=session,
        info={"id": reply, "finish": "stop", "completed_at": now(), "cost": 0.25},
    )
    failed = user_turn(session, "And now?")
    _reply(
        session,
        failed,
        "",
        completed_at=now(),
        finish="error",
        error={"name": "ProviderError", "message": "upstream said 503", "status": 503},
    )
    return session


def test_the_session_page_shows_the_conversation_rendered(admin_client, chat):
    page = admin_client.get(reverse("admin:forge_sessions_session_change", args=[chat.pk]))
    assert page.status_code == 200
    text = page.text
    assert "What is in &lt;notes&gt;?" in text  # escaped, never raw HTML
    assert "<notes>" not in text
    assert "Look at the file first." in text
    assert "tool <code>read_file</code>" in text
    assert "call_ok.txt" in text
    assert "line one\nline two" in text
    assert "tool error: no such file: call_bad.txt" in text
    assert "step finished: stop · tokens in 120 / out 30" in text
    assert "Two lines." in text
    assert "error ProviderError: upstream said 503 (status 503)" in text
    # in order: the question before the tool calls before the answer before the failure
    order = [text.index(s) for s in ("What is in", "call_ok.txt", "Two lines.", "And now?")]
    assert order == sorted(order)


def test_an_open_reply_is_marked_open(admin_client, session):
    asked = user_turn(session, "Hello")
    _reply(session, asked, "Partial answ")
    page = admin_client.get(reverse("admin:forge_sessions_session_change", args=[session.pk]))
    assert "Partial answ" in page.text
    assert "<strong>still open</strong>" in page.text


def test_the_conversation_page_goes_back_in_pages(admin_client, session):
    from sessions.conversation import PAGE

    for i in range(PAGE + 5):
        user_turn(session, f"question number {i:03d}")
    url = reverse("admin:forge_sessions_session_conversation", args=[session.pk])
    newest = admin_client.get(url)
    assert newest.status_code == 200
    assert f"question number {PAGE + 4:03d}" in newest.text
    assert "question number 004" not in newest.text
    assert "question number 005" in newest.text
    older_link = newest.context["next_before"]
    assert older_link
    older = admin_client.get(url, {"before": older_link})
    assert older.status_code == 200
    assert "question number 000" in older.text
    assert "question number 004" in older.text
    assert "question number 005" not in older.text
    assert older.context["next_before"] is None
    # the change page shows the newest page and links to the older ones
    change = admin_client.get(reverse("admin:forge_sessions_session_change", args=[session.pk]))
    assert f"{url}?before={older_link}" in change.text


def test_a_bad_cursor_is_a_clear_error(admin_client, session):
    url = reverse("admin:forge_sessions_session_conversation", args=[session.pk])
    page = admin_client.get(url, {"before": "not an id!"})
    assert page.status_code == 200
    assert "is not a message id" in page.text


def test_staff_of_another_tenant_cannot_read_the_conversation(client, chat, other_user):
    from django.contrib.auth.models import Permission

    other_user.is_staff = True
    other_user.save()
    other_user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="forge_sessions", codename__startswith="view_"
        )
    )
    client.force_login(other_user)
    url = reverse("admin:forge_sessions_session_conversation", args=[chat.pk])
    assert client.get(url).status_code == 404


def test_the_admin_is_branded(admin_client):
    index = admin_client.get(reverse("admin:index"))
    assert "Forge administration" in index.text
