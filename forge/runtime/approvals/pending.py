"""Waiting calls in the store: finding them and logging their answers.

Every function here runs inside the caller's transaction (or opens one) and holds
the session row's lock (the lock every writer and lease taker of the session
takes) while it reads a call's state and logs its answer: of two answers racing
from two processes, the second sees the first's answer and is refused, so exactly
one is logged. A waiting call is a tool part in the state ``awaiting-approval``;
its reply stays open (no ``completed_at``) until no call of it waits any more.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from accounts.models import Tenant
from forge.errors import ApprovalAnswered, ApprovalExpired, ApprovalNotFound, InvalidAnswer
from sessions import services, sql
from sessions.log import format_time, now_ms
from sessions.models import Part, Session

from .. import accounting, lease

AWAITING = "awaiting-approval"
ABORTED = "aborted"  # a reply's stop reason, and a waiting call's when it ends one
EXPIRED = "expired"
NEW_PROMPT = "the user sent a new prompt"
SYSTEM = "system"
# A system denial's reason as the model reads it (``denied_state``).
_SYSTEM_REASONS = {ABORTED: "the reply was aborted"}


def _waiting_rows(**filters: Any) -> Any:
    return Part.objects.filter(type="tool", data__state__status=AWAITING, **filters).order_by("id")


def waiting(*, tenant: Tenant, session: Session, message_id: str | None = None) -> list[dict]:
    """The session's tool parts awaiting an answer (of one reply, with ``message_id``)."""
    rows = _waiting_rows(tenant=tenant, session=session)
    if message_id is not None:
        rows = rows.filter(message_id=message_id)
    return [row.data for row in rows]


def pending_approvals(*, tenant: Tenant, session: Session) -> list[dict[str, Any]]:
    """What ``GET /api/sessions/{id}/`` shows: ``[{call_id, message_id, tool, input,
    expires_at}]``, oldest first."""
    return [_pending(part) for part in waiting(tenant=tenant, session=session)]


def pending_in(sessions: Any) -> list[tuple[Session, dict[str, Any]]]:
    """Every call waiting in ``sessions`` (a queryset), as :func:`pending_approvals`
    shows it, with its session: by session, oldest first; one query."""
    rows = _waiting_rows(session__in=sessions).select_related("session__tenant")
    return [(row.session, _pending(row.data)) for row in rows.order_by("session_id", "id")]


def _pending(part: dict[str, Any]) -> dict[str, Any]:
    return {
        "call_id": part["call_id"],
        "message_id": part["message_id"],
        "tool": part["tool"],
        "input": part["state"].get("input", {}),
        "expires_at": approval_of(part).get("expires_at"),
    }


def approval_of(part: dict[str, Any]) -> dict[str, Any]:
    """The part's ``metadata.approval``, or ``{}`` when it has none or it is no object (a
    tool part's metadata is free-form in the log, and an imported one says anything)."""
    metadata = part["state"].get("metadata")
    approval = metadata.get("approval") if isinstance(metadata, dict) else None
    return approval if isinstance(approval, dict) else {}


def is_expired(part: dict[str, Any], now: str) -> bool:
    """Whether the call is past its expiry. An expiry that is no text (an imported log's
    number) is past: compared with the time, it raised in the janitor's sweep of every
    tenant, at every pass, and no call anywhere expired any more (QA)."""
    return is_past(approval_of(part).get("expires_at"), now)


def is_past(expires: Any, now: str) -> bool:
    """Whether an ``expires_at`` as logged is past at ``now``: none never is, one that is
    no text always is."""
    if expires is None:
        return False
    if not isinstance(expires, str):
        return True
    return bool(expires) and expires <= now  # ISO-8601 UTC, one format: sorts as it reads


def overdue(now: str | None = None) -> list[tuple[str, int, str]]:
    """``(session_id, tenant_id, call_id)`` of every waiting call past its expiry, in
    every tenant the caller sees (the janitor sees all)."""
    now = now or format_time(now_ms())
    found = []
    for row in _waiting_rows().select_related(None).only("session_id", "tenant_id", "id"):
        if is_expired(row.data, now):
            found.append((row.session_id, row.tenant_id, row.data["call_id"]))
    return found


def lock(session: Session) -> None:
    """The session row's lock, for the rest of the transaction."""
    Session.objects.select_for_update(no_key=True).filter(pk=session.pk).values("pk").first()


def _approval(part: dict[str, Any], **answer: Any) -> dict[str, Any]:
    return {**approval_of(part), **answer}


def approved_state(part: dict[str, Any], *, reason: str, at: str, by: Any) -> dict[str, Any]:
    state = part["state"]
    return {
        "status": "running",
        "input": state.get("input", {}),
        "time": {"start": state.get("time", {}).get("start") or at},
        "metadata": {
            "approval": _approval(part, approved=True, reason=reason, at=at, by=by),
        },
    }


def denied_state(part: dict[str, Any], *, reason: str, at: str, by: Any) -> dict[str, Any]:
    """The tool's output the model sees: an error saying it was denied, and why.

    Only a person's answer says the user denied it. The system's denials (``by``
    :data:`SYSTEM`: the approval expired, a new prompt, an abort, which any member
    who may prompt the session can send) say the call was not run, and why: "the
    user denied" it read as the owner's refusal of a call no one had answered."""
    state = part["state"]
    expired = reason == EXPIRED
    if expired:
        error = "this tool call was not run: the approval expired"
    elif by == SYSTEM:
        why = _SYSTEM_REASONS.get(reason, reason or "no reason given")
        error = f"this tool call was not run: {why}"
    else:
        error = f"the user denied this tool call: {reason or 'no reason given'}"
    return {
        "status": "error",
        "input": state.get("input", {}),
        "error": error,
        "metadata": {
            "denied": True,
            "approval": _approval(
                part,
                approved=False,
                reason=reason,
                at=at,
                by=by,
                **({"expired": True} if expired else {}),
            ),
        },
        "time": {"start": state.get("time", {}).get("start") or at, "end": at},
    }


@dataclass(frozen=True)
class Answered:
    """An answer logged: what the answering process goes on with."""

    message_id: str
    part: dict[str, Any]  # the tool part as it was waiting
    approved: bool
    expired: bool  # denied because it was overdue (whatever the answer said)
    others_waiting: bool  # calls of the same reply still wait
    lease_taken: bool  # this process now holds the session's lease and must go on
    state: dict[str, Any]  # the state logged


def log_answers(
    *,
    session: Session,
    answers: Sequence[tuple[str, bool, str]],
    by: Any,
    message_id: str | None = None,
) -> list[Answered]:
    """Log the answers ``(call_id, approve, reason)`` (one transaction, under the
    session's lock): all of them, or none when one is refused.

    ``message_id``: the reply the calls must wait in (a call of another message is
    ``ApprovalNotFound``); the calls of one request are calls of one reply anyway.
    A call past its expiry is denied as expired, whatever the answer (the caller
    tells the client ``ApprovalExpired`` after going on). When the answers leave
    work to do (an approved tool, or the next step once no call of the reply waits)
    the session's lease is taken once, in the same transaction (``SessionBusy``
    while a runner holds it: nothing is logged then), and the caller goes on from
    all of them at once. Raises ``InvalidAnswer`` (no answer, a call twice, calls
    of two replies), ``ApprovalNotFound``, ``ApprovalAnswered``, ``ApprovalExpired``
    (already denied as expired).
    """
    call_ids = [call_id for call_id, _, _ in answers]
    if not call_ids or len(set(call_ids)) != len(call_ids):
        raise InvalidAnswer("answer each waiting call once")
    with transaction.atomic():
        lock(session)
        found = [(_waiting_part(session, call_id, message_id), a, r) for call_id, a, r in answers]
        replies = {part["message_id"] for part, _, _ in found}
        if len(replies) > 1:
            raise InvalidAnswer("the answers of one request are answers to calls of one reply")
        reply = replies.pop()
        now = format_time(now_ms())
        logged: list[tuple[dict[str, Any], bool, str, Any, bool]] = []
        for part, approve, reason in found:
            expired = is_expired(part, now)
            if expired:
                logged.append((part, False, EXPIRED, SYSTEM, True))
            else:
                logged.append((part, approve, reason, by, False))
        answered_ids = {part["id"] for part, _, _ in found}
        others = [
            p
            for p in waiting(tenant=session.tenant, session=session, message_id=reply)
            if p["id"] not in answered_ids
        ]
        go_on = any(approve for _, approve, _, _, _ in logged) or not others
        if go_on:
            dead = lease.acquire(session=session, message_id=reply)
            if dead is not None:
                from ..recovery import finalize_dead_turn

                finalize_dead_turn(session)
        else:
            # Nothing runs: the reply stays suspended and the session idle, as a turn
            # says when it stops. A watcher of the reply (the AI SDK's answer stream)
            # ends on it; with no status it waited for its next heartbeat (QA).
            services.publish_status_on_commit(session_id=session.pk, status="idle")
        out = []
        for part, approve, reason, who, expired in logged:
            make = approved_state if approve else denied_state
            state = make(part, reason=reason, at=now, by=who)
            services.update_part(session=session, part={"id": part["id"], "state": state})
            out.append(
                Answered(
                    message_id=reply,
                    part=part,
                    approved=approve,
                    expired=expired,
                    others_waiting=bool(others),
                    lease_taken=go_on,
                    state=state,
                )
            )
        return out


def _waiting_part(session: Session, call_id: str, message_id: str | None) -> dict[str, Any]:
    """The tool part of ``call_id`` (of reply ``message_id``, when given), waiting;
    else the refusal. Under the session's lock."""
    row = (
        Part.objects.filter(
            tenant_id=session.tenant_id, session=session, type="tool", data__call_id=call_id
        )
        .order_by("-id")
        .first()
    )
    if row is None or (message_id is not None and row.data.get("message_id") != message_id):
        where = "this session" if message_id is None else f"message {message_id[:80]!r}"
        raise ApprovalNotFound(f"no tool call {call_id[:80]!r} waits in {where}")
    part = row.data
    state = part["state"]
    if state.get("status") != AWAITING:
        approval = approval_of(part)
        if approval.get("expired"):
            raise ApprovalExpired(f"tool call {call_id!r} expired and was denied")
        if "approved" in approval:
            raise ApprovalAnswered(f"tool call {call_id!r} was answered already")
        raise ApprovalNotFound(f"tool call {call_id!r} is not waiting for an answer")
    return part


def deny_all(
    *, session: Session, parts: Iterable[dict[str, Any]], reason: str, by: Any = SYSTEM
) -> list[str]:
    """Deny these waiting parts and complete their replies (no step follows: the next
    prompt's turn shows the model the denials). Returns the replies completed.
    Call under the session's lock."""
    now = format_time(now_ms())
    replies: list[str] = []
    for part in parts:
        why = EXPIRED if is_expired(part, now) else reason
        state = denied_state(part, reason=why, at=now, by=by)
        services.update_part(session=session, part={"id": part["id"], "state": state})
        if part["message_id"] not in replies:
            replies.append(part["message_id"])
    for message_id in replies:
        completed = services.update_message(
            session=session, info={"id": message_id, "completed_at": now}
        )
        accounting.reply_completed(session=session, info=completed.data)
    return replies


def any_waiting(session: Session) -> bool:
    """Whether a call of the session waits: the prompt path's check, one raw statement
    (it runs before every turn, and almost never finds one)."""
    with connection.cursor() as cursor:
        return sql.part_in_status_exists(
            cursor,
            sql.Dialect(cursor),
            tenant_id=session.tenant_id,
            session_id=session.pk,
            type="tool",
            status=AWAITING,
        )


def deny_for_new_prompt(session: Session) -> list[str]:
    """A new prompt while calls wait: deny them (reason: the new prompt, or expired)
    and complete their replies, in the prompt's transaction, before it is logged."""
    if not any_waiting(session):
        return []
    parts = waiting(tenant=session.tenant, session=session)
    if not parts:
        return []
    lock(session)
    return deny_all(session=session, parts=parts, reason=NEW_PROMPT)
