"""An imported log bills nothing (a QA finding of 2026-12-06, MEDIUM): its replies ran
elsewhere, and their step-finish parts say whatever the file says. A member imported a
log whose step-finish claimed 10^12 tokens, and the tenant's monthly budget was used
up (the usage API, the admin, the dashboard and the metrics showed them too). Usage
and budgets count what this server's model calls cost: the replies it runs after the
import, in the imported session too. ``rebuild_usage`` agrees (the session's
``copied_through`` says which events came with the import)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from forge.models import Usage
from forge.usage import selectors
from forge.usage.budgets import check_budget
from forge.usage.services import rebuild_usage, record_reply, set_budget
from sessions import selectors as session_selectors
from sessions import services
from sessions.models import Session

from .helpers import reply
from .test_api import client_for

pytestmark = pytest.mark.django_db

HUGE = 10**12
NDJSON = "application/x-ndjson"


def _rows() -> list[tuple[Any, ...]]:
    return sorted(
        (u.tenant_id, u.user_id, u.day, u.turns, u.steps, u.input_tokens, u.cost_nanos)
        for u in Usage.objects.all()
    )


def _forged_log(other_user: Any) -> bytes:
    """A log written elsewhere (another tenant here: the store's writes count nothing)
    whose one reply's step-finish claims 10^12 tokens; its chain verifies."""
    source = services.create_session(user=other_user, title="forged")
    reply(source, steps=[{"tokens": {"input": HUGE, "output": HUGE}, "cost": 10**6}])
    return "".join(f"{line}\n" for line in session_selectors.export_lines(session=source)).encode()


def test_an_imported_reply_counts_in_no_usage_and_no_budget(user, other_user):
    body = _forged_log(other_user)
    client = client_for(user)
    response = client.generic("POST", "/api/sessions/import/", body, content_type=NDJSON)
    assert response.status_code == 201, response.content
    imported = Session.objects.get(user=user)
    tenant = imported.tenant

    usage = client.get("/api/usage/", {"group_by": "user"}).json()["results"]
    assert usage == []
    tokens, cost = selectors.month_use(tenant=tenant, user_id=None, now=dt.datetime.now(dt.UTC))
    assert (tokens, cost) == (0, 0)
    set_budget(tenant=tenant, monthly_tokens=1000)
    check_budget(tenant=tenant, user_id=user.pk)  # let in: nothing was used here

    rebuild_usage(tenant=tenant)  # the rebuild reads the same from the log
    assert not Usage.objects.filter(tenant=tenant).exists()

    # A reply this server runs in the imported session counts, live and rebuilt alike.
    _opened, done = reply(imported, steps=[{"tokens": {"input": 7, "output": 3}, "cost": 0.5}])
    record_reply(session=imported, info=done)
    (row,) = Usage.objects.filter(tenant=tenant)
    assert (row.turns, row.steps, row.input_tokens, row.output_tokens) == (1, 1, 7, 3)
    recorded = _rows()
    rebuild_usage(tenant=tenant)
    assert _rows() == recorded


def test_a_reply_imported_open_is_ended_and_billed_nothing(user, other_user):
    """The import ends a reply exported while it streamed (as interrupted): that ending
    is the import's, and counts no turn, no step and no token, live or rebuilt."""
    source = services.create_session(user=other_user, title="streaming")
    asked = services.update_message(session=source, info={"role": "user"}).data["id"]
    opened = services.update_message(
        session=source,
        info={
            "role": "assistant",
            "parent_id": asked,
            "agent": "build",
            "model": {"provider": "offline", "model": "echo"},
        },
    ).data
    services.update_part(
        session=source,
        part={
            "message_id": opened["id"],
            "type": "step-finish",
            "reason": "tool-calls",
            "tokens": {"input": HUGE},
            "cost": 10**6,
        },
    )
    events = [*services.parse_log(list(session_selectors.export_lines(session=source)))]
    copy = services.import_log(user=user, events=events, copy=True)
    ended = copy.messages.filter(role="assistant").get()
    assert ended.data["completed_at"]  # ended by the import
    assert not Usage.objects.filter(tenant=copy.tenant).exists()
    rebuild_usage(tenant=copy.tenant)
    assert not Usage.objects.filter(tenant=copy.tenant).exists()


def test_a_log_imported_keeping_its_ids_bills_nothing(user, tenant):
    """``manage.py import_session`` keeps a log's ids and its events byte for byte: the
    marker is the session's, beside its log, and the chain still verifies."""
    source = services.create_session(user=user, title="mine")
    reply(source, steps=[{"tokens": {"input": HUGE}, "cost": 10**6}])
    events = services.parse_log(list(session_selectors.export_lines(session=source)))
    services.delete_session(session=source)
    Usage.objects.all().delete()  # what the source's deletion kept is not the point
    from forge.models import RetiredUsage

    RetiredUsage.objects.all().delete()
    kept = services.import_log(user=user, events=events)
    assert kept.pk == events[0]["session_id"]
    assert Session.objects.get(pk=kept.pk).copied_through == events[-1]["seq"]
    assert not Usage.objects.exists()
    rebuild_usage(tenant=tenant)
    assert not Usage.objects.exists()
    relogged = services.parse_log(list(session_selectors.export_lines(session=kept)))
    assert relogged == events  # byte for byte: the chain is the source's


def test_a_fork_bills_nothing_it_copied(session, user):
    """A fork goes the same way: what it copied is marked as such, and the fork's own
    replies alone count in it."""
    _opened, done = reply(session, steps=[{"tokens": {"input": 4}, "cost": 0.5}])
    record_reply(session=session, info=done)
    later = services.update_message(session=session, info={"role": "user"}).data["id"]
    recorded = _rows()
    fork = services.fork_session(session=session, user=user, before_message_id=later)
    head = fork.events.order_by("-seq").values_list("seq", flat=True).first()
    assert Session.objects.get(pk=fork.pk).copied_through == head
    assert _rows() == recorded
    rebuild_usage(tenant=session.tenant)
    assert _rows() == recorded


def test_a_reply_copied_open_and_run_on_here_counts_its_new_steps_only():
    """The fold's rule: a reply the import left open (awaiting an approval) and that ran
    on here counts one turn and the steps logged after the copy, not those it brought."""
    from forge.usage.fold import fold_log

    model = {"provider": "offline", "model": "echo"}
    opened = {
        "id": "msg_b",
        "role": "assistant",
        "created_at": "2026-12-01T10:00:00.000Z",
        "agent": "build",
        "model": model,
    }

    def step(part_id: str, tokens: int) -> dict[str, Any]:
        return {
            "id": part_id,
            "message_id": "msg_b",
            "type": "step-finish",
            "tokens": {"input": tokens},
        }

    events = [
        {"seq": 2, "type": "message.updated", "data": opened},
        {"seq": 3, "type": "part.updated", "data": step("prt_a", HUGE)},
        {"seq": 4, "type": "part.updated", "data": step("prt_b", 9)},
        {
            "seq": 5,
            "type": "message.updated",
            "data": {**opened, "completed_at": "2026-12-01T10:01:00.000Z"},
        },
    ]
    ((_key, totals),) = fold_log(events, owner_id=1, copied_through=3)
    assert (totals.turns, totals.steps, totals.tokens["input"]) == (1, 1, 9)
    assert fold_log(events, owner_id=1, copied_through=5) == []
    ((_key, everything),) = fold_log(events, owner_id=1)
    assert everything.tokens["input"] == HUGE + 9


def test_an_imported_step_left_open_is_billed_nothing_by_recovery(user, other_user, settings):
    """Recovery bills the step a dead runner was in (``recovery.dead_step_end``), from
    the log alone. A reply an import left open (a call of a finished step awaits an
    approval) may also hold a step with no end: it ran elsewhere, if anywhere. Estimated
    by start-up's recovery, its step-finish was logged after the copy, and the reply's
    completion (here a denial) billed the import's history as this server's request."""
    settings.FORGE_MODEL_PRICES = {
        **settings.FORGE_MODEL_PRICES,
        "offline/echo": {"input": 1.0, "output": 1.0},
    }
    from forge.runtime import recover_sessions
    from forge.runtime.approvals.pending import deny_all, waiting

    source = services.create_session(user=other_user, title="waiting")
    asked = services.update_message(session=source, info={"role": "user"}).data["id"]
    services.update_part(
        session=source, part={"message_id": asked, "type": "text", "text": "x" * 40_000}
    )
    opened = services.update_message(
        session=source,
        info={
            "role": "assistant",
            "parent_id": asked,
            "agent": "build",
            "model": {"provider": "offline", "model": "echo"},
        },
    ).data["id"]
    start = "2026-11-30T00:00:00.000Z"
    for part in (
        {"type": "step-start"},
        {
            "type": "tool",
            "call_id": "c1",
            "tool": "read_file",
            "state": {"status": "awaiting-approval", "input": {}, "time": {"start": start}},
        },
        {"type": "step-finish", "reason": "tool-calls"},
        {"type": "step-start"},
        {"type": "text", "text": "y" * 40_000, "time": {"start": start}},
    ):
        services.update_part(session=source, part={"message_id": opened, **part})
    events = [*services.parse_log(list(session_selectors.export_lines(session=source)))]
    copy = services.import_log(user=user, events=events, copy=True)
    reply_row = copy.messages.filter(role="assistant").get()
    assert not reply_row.data["completed_at"]  # its call waits for an answer

    recover_sessions()  # start-up's: every session with an open reply
    deny_all(session=copy, parts=waiting(tenant=copy.tenant, session=copy), reason="no")
    copy.refresh_from_db()
    assert copy.messages.filter(role="assistant").get().data["completed_at"]
    assert [
        (u.steps, u.input_tokens, u.output_tokens, u.cost_nanos)
        for u in Usage.objects.filter(tenant=copy.tenant)
    ] in ([], [(0, 0, 0, 0)])
    rebuild_usage(tenant=copy.tenant)
    assert not Usage.objects.filter(tenant=copy.tenant, steps__gt=0).exists()
