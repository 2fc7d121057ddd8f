"""Answering a call that awaits approval, and expiring the overdue ones.

:func:`answer` is the one entry of every face (the REST route, the socket frame;
the AI SDK route answers several calls at once through :func:`answer_all`, the
same path): it checks the caller, logs the answer exactly once
(``pending.log_answers``: the session row's lock and the call's state, in one
transaction, before anything runs), and, when there is work to do, goes on with
the turn in *this* process: the approved tool runs, then, once no call of the
reply waits, the next step, under the session's lease like any turn.

Expiry: every serving process's lease janitor (``forge.runtime.recovery``)
calls :func:`expire_overdue` each lease period; the answer path and the prompt
path also deny an overdue call as expired when they meet it. Whichever process
gets there first logs it; the others find it answered and skip it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync

from accounts import tenancy
from accounts.selectors import member
from forge.db.worker import db, release_connections
from forge.errors import (
    ApprovalAnswered,
    ApprovalExpired,
    ApprovalNotFound,
    ForgeError,
    InvalidAnswer,
    SessionBusy,
)
from sessions import bus, selectors
from sessions.models import Session

from .. import lease
from ..agents import reply_agent_and_model
from ..runner import start_resumed, starting
from ..shielding import finish_then_cancel
from ..steps import Resume
from ..turn import Turn
from . import pending

logger = logging.getLogger(__name__)

MAX_REASON = 2000


@dataclass(frozen=True)
class Outcome:
    task: asyncio.Task[None] | None  # the turn going on in this process, if any
    expired: bool  # the call was overdue: denied as expired, the answer refused


def check_answer(call_id: Any, approve: Any, reason: Any) -> str:
    """The answer's shape (400 ``invalid_answer``); returns the reason, stripped."""
    if not isinstance(call_id, str) or not 0 < len(call_id) <= 200:
        raise InvalidAnswer("call_id must be the tool call's id")
    if not isinstance(approve, bool):
        raise InvalidAnswer("approve must be true or false")
    if reason is None:
        reason = ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidAnswer(f"reason must be text of at most {MAX_REASON} characters")
    if "\x00" in reason:
        raise InvalidAnswer("reason must not hold a NUL character")
    return reason.strip()


async def answer(
    *, session: Session, user: Any, call_id: str, approve: bool, reason: str = ""
) -> None:
    """Answer the call ``call_id`` of ``session`` as ``user`` (its owner only).

    Returns once the answer is logged; the turn goes on as a task of this loop.
    Raises ``InvalidAnswer`` (400), ``ApprovalNotFound`` (404: no such call
    waiting, or not the owner), ``ApprovalAnswered`` (409), ``ApprovalExpired``
    (409: it was overdue, and is now denied as expired; the turn goes on),
    ``SessionBusy`` (409: the session's runner is busy with another answer; try
    again).
    """
    if await answer_all(session=session, user=user, answers=[(call_id, approve, reason)]):
        raise ApprovalExpired(_expired([(call_id, approve, reason)]))


async def answer_all(
    *,
    session: Session,
    user: Any,
    answers: Sequence[tuple[Any, Any, Any]],
    message_id: str | None = None,
) -> bool:
    """Answer several calls of one reply at once, ``(call_id, approve, reason)`` each
    (the AI SDK client answers every call of a step in one request): all are logged
    in one transaction, or none (any refusal of :func:`answer` refuses them all), and
    the turn goes on once, from all of them. ``message_id``: the reply the calls
    must wait in (``ApprovalNotFound`` for a call of another message).

    Returns whether one of them was past its expiry, and so was logged denied as
    expired instead (the others are logged as answered, and the turn goes on): not an
    error here. :func:`answer`, the single answer of the REST route and the socket,
    says it as ``ApprovalExpired`` (409); the AI SDK route streams the rest of the
    reply, in which that call shows denied (a 409 there told the client the request
    failed while the turn went on with the other answers, QA)."""
    outcome = await start_answers(
        session=session, user=user, answers=answers, message_id=message_id
    )
    return outcome.expired


def _expired(answers: Sequence[tuple[Any, Any, Any]]) -> str:
    return f"tool call {answers[0][0]!r} expired and was denied"


async def start_answer(
    *, session: Session, user: Any, call_id: Any, approve: Any, reason: Any = ""
) -> Outcome:
    return await start_answers(session=session, user=user, answers=[(call_id, approve, reason)])


async def start_answers(
    *,
    session: Session,
    user: Any,
    answers: Sequence[tuple[Any, Any, Any]],
    message_id: str | None = None,
) -> Outcome:
    checked = [
        (call_id, approve, check_answer(call_id, approve, reason))
        for call_id, approve, reason in answers
    ]
    if user is None or getattr(user, "pk", None) != session.user_id:
        call_id = str(checked[0][0]) if checked else ""
        raise ApprovalNotFound(f"no tool call {call_id[:80]!r} waits for you in this session")
    return await _log_and_go_on(session=session, answers=checked, by=user.pk, message_id=message_id)


async def _log_and_go_on(
    *,
    session: Session,
    answers: Sequence[tuple[str, bool, str]],
    by: Any,
    message_id: str | None = None,
) -> Outcome:
    # A caller cancelled meanwhile (a closed socket, a server stopping) lets the answers'
    # transaction, which goes on in the database's thread, and the turn it resumes, go
    # on: it ran nothing, the answers logged and the lease held until it expired (review).
    return await finish_then_cancel(
        _log_and_start(session=session, answers=answers, by=by, message_id=message_id)
    )


async def _log_and_start(
    *,
    session: Session,
    answers: Sequence[tuple[str, bool, str]],
    by: Any,
    message_id: str | None,
) -> Outcome:
    # An abort arriving once the answers' transaction took the lease, before the resumed
    # turn's runner is registered, stops it as it starts (``runner.starting``).
    with starting(session.pk):
        lease_asked_at = time.monotonic()  # a lease taken with the answers counts from here
        logged = await db(pending.log_answers)(
            session=session, answers=answers, by=by, message_id=message_id
        )
        task = None
        if logged[0].lease_taken:
            try:
                turn = await db(turn_of)(session, logged[0].message_id)
                turn.lease_asked_at = lease_asked_at
                resumes = [
                    Resume(
                        call_id=answered.part["call_id"],
                        part=answered.part,
                        approved=answered.approved,
                        approval=answered.state["metadata"]["approval"],
                    )
                    for answered in logged
                ]
                task = start_resumed(turn, resumes)
            except BaseException:
                await asyncio.shield(
                    db(lease.release)(session_id=session.pk, tenant_id=session.tenant_id)
                )
                raise
    return Outcome(task=task, expired=any(answered.expired for answered in logged))


def turn_of(session: Session, message_id: str) -> Turn:
    """The suspended turn of the reply ``message_id``, rebuilt from the log alone."""
    info = selectors.message_info(tenant=session.tenant, session=session, message_id=message_id)
    if info is None:
        raise ApprovalNotFound(f"no reply {message_id!r} in this session")
    agent, resolved = reply_agent_and_model(info)
    speaker = member(tenant=session.tenant, user_id=info.get("user_id")) or session.user
    return Turn(
        session=session,
        user_message_id=info.get("parent_id") or "",
        message_id=message_id,
        agent=agent,
        model=resolved,
        speaker=speaker,
    )


def answer_sync(
    *, session: Session, user: Any, call_id: Any, approve: Any, reason: Any = ""
) -> None:
    """:func:`answer` for synchronous callers (DRF views). Under a server loop the turn
    goes on as its task; where none runs, it runs to its end before this returns."""
    if answer_all_sync(session=session, user=user, answers=[(call_id, approve, reason)]):
        raise ApprovalExpired(_expired([(call_id, approve, reason)]))


def answer_all_sync(
    *,
    session: Session,
    user: Any,
    answers: Sequence[tuple[Any, Any, Any]],
    message_id: str | None = None,
) -> bool:
    """:func:`answer_all` for synchronous callers, as :func:`answer_sync`; returns whether
    a call was past its expiry (logged denied as expired)."""
    if bus.server_loop() is not None:
        release_connections()
        return bool(
            async_to_sync(answer_all)(
                session=session, user=user, answers=answers, message_id=message_id
            )
        )

    async def whole() -> Outcome:
        outcome = await start_answers(
            session=session, user=user, answers=answers, message_id=message_id
        )
        if outcome.task is not None:
            await asyncio.wait({outcome.task})
        await bus.flush()
        return outcome

    return asyncio.run(whole()).expired


# --- expiry -----------------------------------------------------------------------


async def expire(*, session: Session, call_id: str) -> asyncio.Task[None] | None:
    """Deny an overdue call as expired and go on with its turn (None: someone else
    answered it first, or the session's runner is busy: the next sweep retries)."""
    try:
        outcome = await _log_and_go_on(
            session=session, answers=[(call_id, False, pending.EXPIRED)], by=pending.SYSTEM
        )
    except (ApprovalAnswered, ApprovalExpired, ApprovalNotFound, SessionBusy):
        return None
    return outcome.task


def expire_overdue() -> int:
    """Deny every overdue call (the janitor's sweep, in its own thread). Each turn goes
    on in the loop of :func:`continuations`, not here: run here, a turn held up every
    other expiry and the janitor's recovery of dead runners behind it, and one longer
    than ten ``FORGE_TOOL_TIMEOUT`` was cancelled, its reply ended as "aborted"
    though no one had asked (QA). Returns how many were denied."""
    denied = 0
    for session_id, _tenant_id, call_id in pending.overdue():
        session = Session.objects.filter(pk=session_id).select_related("tenant", "user").first()
        if session is None:
            continue
        # The denial is logged on the runtime's thread, which needs a connection of the
        # same pool: one held here while waiting starved a small pool (FORGE_DB_POOL=2:
        # a request waited for it; QA).
        release_connections()
        logged = asyncio.run_coroutine_threadsafe(
            expire(session=session, call_id=call_id), continuations()
        )
        try:
            denied += int(logged.result(timeout=EXPIRE_TIMEOUT) is not None)
        except ForgeError:
            logger.exception("expiring tool call %s of session %s failed", call_id, session_id)
        except TimeoutError:
            logged.cancel()
            logger.warning("expiring tool call %s of session %s timed out", call_id, session_id)
    return denied


# How long the janitor waits for one expiry to be logged and its turn started.
EXPIRE_TIMEOUT = 60.0

_continuations: asyncio.AbstractEventLoop | None = None
_continuations_lock = threading.Lock()


def continuations() -> asyncio.AbstractEventLoop:
    """The event loop, in a thread of its own for the process's life, where the turns
    that go on after an expired approval run (each to its end, side by side)."""
    global _continuations
    with _continuations_lock:
        if _continuations is None or _continuations.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=_run_forever, args=(loop,), name="forge-continuations", daemon=True
            ).start()
            _continuations = loop
        return _continuations


def started_continuations() -> asyncio.AbstractEventLoop | None:
    """The loop of :func:`continuations` if this process has started it (None: no turn
    ever went on after an expiry here), without starting one."""
    with _continuations_lock:
        if _continuations is None or _continuations.is_closed():
            return None
        return _continuations


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    tenancy.activate(tenancy.ALL)  # as the janitor: each turn's task sees its own tenant
    asyncio.set_event_loop(loop)
    loop.run_forever()
