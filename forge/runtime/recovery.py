"""Turns a dead runner left open, finalized: one function for start-up, the janitor
and ``manage.py recover_sessions``.

A runner that dies (``kill -9``, a lost machine) leaves its session's lease to
expire and its reply open. :func:`recover_sessions` finalizes every such turn
whose lease has expired: open text keeps what had streamed when the in-flight
mirror (Redis) has it, running tools end as interrupted, the reply gets a
``MessageAbortedError``. A session whose lease is live is left alone: another
process runs it.

Each serving process runs a janitor thread from start-up (:func:`start_janitor`)
that calls it every lease period, so a reply never stays open waiting for the
next prompt or the next restart.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from functools import partial
from typing import Any

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from accounts import tenancy
from forge.context import request_for
from forge.errors import NotRunning
from forge.models import SessionLease
from forge.providers import events as ev
from forge.telemetry import metrics, tracing
from sessions import services
from sessions.ids import new_part_id
from sessions.models import Message, Part, Session

from . import lease
from .agents import reply_agent_and_model
from .approvals.pending import ABORTED
from .compaction import estimate_tokens
from .finalize import INTERRUPTED, finalize_open_messages, unfinished_step_start
from .inflight import mirror
from .model_calls import price

logger = logging.getLogger(__name__)


def finalize_dead_turn(session: Session, *, deny_waiting: str | None = None) -> list[str]:
    """Finalize what the session's dead runner left open, keeping the text that had
    streamed (from the in-flight mirror, when there is one). Call it holding the
    session's lease, or having found it expired. Calls awaiting approval keep waiting
    (the approval is durable) unless ``deny_waiting`` says why they are denied (a
    user's abort: ``finalize_open_messages``). The step the runner was in is billed
    (:func:`dead_step_end`)."""
    shared = mirror()
    texts = shared.texts_sync(session.pk) if shared is not None else {}
    finished = finalize_open_messages(
        session=session,
        reason=INTERRUPTED,
        texts=texts,
        deny_waiting=deny_waiting,
        estimate_cut=partial(dead_step_end, session),
    )
    for message_id in finished:  # the end of each reply, in its own trace
        with tracing.turn_span(
            session_id=session.pk,
            message_id=message_id,
            agent=session.agent or "",
            model="",
            resumed=True,
        ) as span:
            tracing.failed(span, "Interrupted", INTERRUPTED)

    def counted() -> None:
        metrics.LEASE_TAKEOVERS.inc()
        metrics.TURNS_RECOVERED.inc(len(finished))

    transaction.on_commit(counted)
    return finished


def dead_step_end(
    session: Session, item: Mapping[str, Any], texts: Mapping[str, str]
) -> dict[str, Any] | None:
    """The ``step-finish`` (reason ``aborted``) of the step a dead runner's reply left
    unfinished, or None when every step of it ended. A runner killed, or stopped by its
    lost lease, while the model streamed logged no end of that step, and the provider
    had billed it: unlogged, the reply cost nothing of it (docs/operations.md).

    The provider's count, if the runner had it, went with the runner: the step is
    estimated as a stopped one is (``StepMeter.cut``), every character / 4. In: the
    step's request, derived from the log as of the event before its ``step-start``, as
    ``replay_session --at`` derives it (nothing the model sees is logged between the
    request and the step-start, held until the step's first write). Out: what the log
    and the in-flight mirror (``texts``) hold of the step's text, reasoning and call
    arguments. Nothing for a step the session's log copied (an import's: it ran
    elsewhere, and bills nothing, ``forge.usage.fold``)."""
    parts = item["parts"]
    start = unfinished_step_start(parts)
    if start is None:
        return None
    seq = (
        Part.objects.filter(tenant_id=session.tenant_id, session=session, pk=parts[start]["id"])
        .values_list("seq", flat=True)
        .first()
    )
    if seq is None or seq <= (session.copied_through or 0):
        # A step an import (or a fork) copied ran elsewhere, if anywhere: a reply the
        # import left open for an answer holds it, and its estimate billed the copy's
        # history as this server's request (QA).
        return None
    try:
        sent = estimate_tokens(request_for(session, at=seq - 1)[1])
    except Exception:  # never in the way of finalizing: the output is billed still
        logger.exception("session %s: the dead step's request was not derived", session.pk)
        sent = 0
    streamed = 0
    for part in parts[start + 1 :]:
        if part["type"] in ("text", "reasoning"):
            streamed += len(texts.get(part["id"]) or part.get("text") or "")
        elif part["type"] == "tool" and part["state"].get("input"):
            streamed += len(json.dumps(part["state"]["input"], ensure_ascii=False))
    usage = ev.Usage(input=sent, output=streamed // 4)
    _, model = reply_agent_and_model(item["info"])  # what it ran on (an import names any)
    return {
        "id": new_part_id(),
        "message_id": item["info"]["id"],
        "type": "step-finish",
        "reason": "aborted",
        "snapshot": parts[start].get("snapshot"),
        "tokens": usage.as_tokens(),
        "cost": price(model, usage),
    }


def on_session_imported(sender: Any, session: Session, **kwargs: Any) -> list[str]:
    """``sessions.signals.session_imported``: a log exported while a reply was streaming
    carries that reply open, and no process runs it here; it ends as interrupted now, in
    the import's transaction, as :func:`finalize_dead_turn` ends a dead runner's (a reply
    whose tool calls await an approval stays open for the answer). The ending is the
    import's, and is billed and counted nowhere (``billed=False``: no usage, no turn
    metric): the reply ran elsewhere, and its step-finish parts say what its file says.
    The import then marks all it wrote as copied (``Session.copied_through``), so
    ``rebuild_usage`` counts it nowhere either."""
    return finalize_open_messages(session=session, reason=INTERRUPTED, billed=False)


def recover_session(session: Session) -> list[str]:
    """Finalize the turn a dead runner left open in this session (if its lease expired).

    Returns the ids of the messages it finalized. Open parts keep the text that
    had streamed when the Redis mirror has it.

    Under the session row's lock, taken before the lease and the open replies are
    read: every process's janitor looks at the same expired leases, and two that
    finalized one turn at once both wrote its completion, the second with the text
    the first had already taken from the mirror gone (a fourth-round finding: the
    kept text was overwritten with ""). The second now waits, then finds nothing open.
    """
    with transaction.atomic():
        _lock(session)
        current = lease.current(session_id=session.pk)
        if current is not None and current.expires_at > timezone.now():
            return []  # a live runner holds it
        finished = finalize_dead_turn(session)
        if current is not None:
            current.delete()
        if finished or current is not None:
            # The dead runner never said ``idle``: a page that saw ``busy`` before the
            # crash would wait with its prompt disabled until a reload.
            services.publish_status_on_commit(session_id=session.pk, status="idle")
    return finished


def _lock(session: Session) -> None:
    """The session row's lock, which every writer and lease taker of the session takes
    (on SQLite the transaction's ``BEGIN IMMEDIATE`` is the lock)."""
    Session.objects.select_for_update(no_key=True).filter(pk=session.pk).values("pk").first()


def abort_unheld(session: Session, *, only: str | None = None) -> SessionLease | None:
    """A user's abort of a session no live runner holds: end what is open, as aborted.

    Under the session's lock, so that no answer or prompt takes the lease meanwhile.
    Returns the live lease, doing nothing, when a runner holds the session (the
    caller asks that runner to stop). Else:

    * an expired lease: its runner died; the turn is finalized as the janitor would
      (``finalize_dead_turn``), except that calls awaiting approval are denied as
      ``aborted`` (the user asked the reply to stop), and the lease is dropped;
    * no lease: a reply that only waits for approval (suspended, no process runs it)
      has its waiting calls denied as ``aborted`` and completes as aborted.

    Raises ``NotRunning`` when nothing was open (nothing is written then). Reads first
    without the lock: an abort of an idle session (the common mistake) takes no
    write lock, and a live lease needs none.

    ``only``: the reply to end (one whose runner ended as it was told to stop, its
    reply left open: ``runner.abort_turn``); None, doing nothing, once it is not open
    (a prompt ended it and may run the session's next turn)."""
    held = lease.current(session_id=session.pk)
    if held is not None and held.expires_at > timezone.now():
        return held
    if held is None and not _open_replies(session):
        raise NotRunning("no turn is running in this session")
    with transaction.atomic():
        _lock(session)
        if only is not None and not reply_open(session, only):
            return None
        held = lease.current(session_id=session.pk)
        if held is not None and held.expires_at > timezone.now():
            return held
        if held is not None:
            finalize_dead_turn(session, deny_waiting=ABORTED)
            held.delete()
            services.publish_status_on_commit(session_id=session.pk, status="idle")
            return None
        if not finalize_open_messages(session=session, reason=ABORTED, deny_waiting=ABORTED):
            raise NotRunning("no turn is running in this session")
        return None


def reply_open(session: Session, message_id: str) -> bool:
    """Whether the session's reply ``message_id`` is not completed (running, or waiting
    for approval with no process running it)."""
    return Message.objects.filter(
        tenant_id=session.tenant_id, session=session, pk=message_id, data__completed_at=None
    ).exists()


def _open_replies(session: Session) -> bool:
    return Message.objects.filter(
        tenant_id=session.tenant_id, session=session, role="assistant", data__completed_at=None
    ).exists()


def abort_dead_holder(session: Session, held: SessionLease) -> bool:
    """Take the session over from the dead holder of ``held`` (``lease.judged_dead``,
    after it did not answer an abort) and finalize its turn as :func:`abort_unheld`
    does an expired one. Returns False, doing nothing, when the lease changed since
    it was read (the holder renewed it, so it is alive, or released it, or another
    took it): the lease is deleted only as it was read, under the session's lock,
    so a live holder's renewal and this takeover cannot both happen. A holder that
    renews after the takeover finds its lease gone and stops its turn."""
    with transaction.atomic():
        _lock(session)
        taken, _ = SessionLease.objects.filter(
            session_id=session.pk,
            tenant_id=session.tenant_id,
            owner=held.owner,
            acquired_at=held.acquired_at,
            heartbeat_at=held.heartbeat_at,
        ).delete()
        if not taken:
            return False
        finalize_dead_turn(session, deny_waiting=ABORTED)
        services.publish_status_on_commit(session_id=session.pk, status="idle")
    return True


def recover_sessions(
    *, session_id: str | None = None, open_replies: bool = True
) -> dict[str, list[str]]:
    """Finalize every turn left open by a process that died: ``{session: [message ids]}``.

    Looks at sessions whose lease expired and, with ``open_replies`` (start-up
    and the command), at every session with an unfinished reply; the janitor,
    which runs every lease period, looks at expired leases only.
    """
    candidates = set(lease.expired_sessions())
    if open_replies:
        candidates |= set(
            Message.objects.filter(role="assistant", data__completed_at=None).values_list(
                "session_id", flat=True
            )
        )
    if session_id is not None:
        candidates &= {session_id}
    recovered: dict[str, list[str]] = {}
    for session in Session.objects.filter(pk__in=candidates).select_related("tenant"):
        finished = recover_session(session)
        if finished:
            recovered[session.pk] = finished
    return recovered


def held_open(*, session_id: str | None = None) -> list[SessionLease]:
    """The live leases of sessions with an unfinished reply, soonest expiry first: what
    :func:`recover_sessions` leaves alone (a runner may be alive). A lease whose
    process died is among them until it expires."""
    open_sessions = Message.objects.filter(role="assistant", data__completed_at=None).values_list(
        "session_id", flat=True
    )
    if session_id is not None:
        open_sessions = open_sessions.filter(session_id=session_id)
    return list(
        SessionLease.objects.filter(
            session_id__in=open_sessions, expires_at__gt=timezone.now()
        ).order_by("expires_at")
    )


class Janitor(threading.Thread):
    """Finalizes dead runners' turns every ``interval`` seconds, in its own thread.

    A thread, not a task of some event loop: it runs from the moment a serving
    process starts (``forge.asgi``), before any request or turn, and whatever
    server or loop the process uses.
    """

    def __init__(self, interval: float) -> None:
        super().__init__(name="forge-lease-janitor", daemon=True)
        self.interval = interval
        self.stopping = threading.Event()

    def run(self) -> None:
        tenancy.activate(tenancy.ALL)  # its own thread and context: it watches every tenant
        while not self.stopping.wait(self.interval):
            try:
                recovered = recover_sessions(open_replies=False)
            except Exception:
                logger.exception("the lease janitor failed; trying again later")
                continue
            finally:
                close_old_connections()
            for session_id, message_ids in recovered.items():
                logger.warning(
                    "finalized %s of session %s (its runner died)", message_ids, session_id
                )
            self.expire_approvals()

    def expire_approvals(self) -> None:
        """Deny the tool calls whose approval expired (docs/approvals.md), and go on
        with their turns. Imported here: the approvals' services sit above recovery."""
        from .approvals.services import expire_overdue

        try:
            denied = expire_overdue()
        except Exception:
            logger.exception("expiring approvals failed; trying again later")
            return
        finally:
            close_old_connections()
        if denied:
            logger.info("denied %d tool call(s) whose approval expired", denied)

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.join(timeout)


_janitor: Janitor | None = None
_janitor_lock = threading.Lock()


def start_janitor(interval: float | None = None) -> Janitor | None:
    """Start this process's janitor once (if ``FORGE_LEASE_JANITOR`` is on); return it."""
    global _janitor
    if not settings.FORGE_LEASE_JANITOR:
        return None
    with _janitor_lock:
        if _janitor is None or not _janitor.is_alive() or _janitor.stopping.is_set():
            _janitor = Janitor(interval or lease.lease_seconds())
            _janitor.start()
        return _janitor
