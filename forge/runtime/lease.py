"""One runner per session: a lease row in the database.

A process that starts a turn takes the session's lease (owner, heartbeat,
expiry) and renews it while the turn runs; another process's prompt is refused
as busy. A lease whose owner died (no renewal) expires after
``FORGE_LEASE_SECONDS``; whoever finds it expired finalizes the turn it left
open before starting a new one.

The lease row carries its session's tenant, and the statements of a turn (take,
renew, release) name it, so that under Citus each runs on the tenant's one shard
(docs/deploy.md, "Citus"). On PostgreSQL its key is ``(session_id, tenant_id)``
(``forge.migrations.0008_citus_keys``), which the upsert names; on SQLite it is
``session_id``.
"""

from __future__ import annotations

import math
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from forge.errors import SessionBusy
from forge.models import SessionLease
from sessions import services
from sessions.exceptions import NotFound
from sessions.ids import new_message_id
from sessions.models import Session

# acquire() and release() run around every turn: plain SQL, no ORM compile per turn.
LEASE = SessionLease._meta.db_table
SESSION = Session._meta.db_table
# A lease taken over from a dead turn does not keep what that turn held against budgets.
_UNRESERVED = "reserved_by = NULL, reserved_tokens = 0, reserved_cost_nanos = 0"
_TAKE = (  # SQLite
    f"INSERT INTO {LEASE} (session_id, tenant_id, owner, message_id, acquired_at, heartbeat_at, "
    "expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET "
    "owner = excluded.owner, message_id = excluded.message_id, "
    "acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at, "
    f"expires_at = excluded.expires_at, {_UNRESERVED}"
)

# PostgreSQL: the lock, the read and the upsert in one statement (one round trip). The
# read runs on the statement's snapshot, so after waiting for the session's lock it can
# miss a lease that the runner it waited for committed; the upsert cannot: ON CONFLICT
# sees the newest committed row, and its WHERE takes over only a lease that expired.
# So the lease is ours exactly when the upsert wrote a row, whatever the read said.
_TAKE_ONE = (
    f"WITH s AS (SELECT id, tenant_id FROM {SESSION} WHERE id = %s AND tenant_id = %s "
    "FOR NO KEY UPDATE), "
    f"old AS (SELECT l.owner, l.message_id, l.expires_at > %s AS live FROM s "
    f"LEFT JOIN {LEASE} l ON l.session_id = s.id AND l.tenant_id = s.tenant_id), "
    f"up AS (INSERT INTO {LEASE} (session_id, tenant_id, owner, message_id, acquired_at, "
    "heartbeat_at, expires_at) SELECT s.id, s.tenant_id, %s, %s, %s, %s, %s FROM s, old "
    "WHERE old.owner IS NULL OR NOT old.live ON CONFLICT (session_id, tenant_id) DO UPDATE SET "
    "owner = excluded.owner, message_id = excluded.message_id, "
    "acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at, "
    f"expires_at = excluded.expires_at, {_UNRESERVED} WHERE {LEASE}.expires_at <= %s "
    "RETURNING 1) "
    "SELECT old.owner, old.message_id, (SELECT count(*) FROM up) FROM old"
)

# This process's identity as a lease owner.
OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DeadLease:
    """A lease found expired when taking the session: its turn was left open."""

    owner: str
    message_id: str


# A live holder renews its lease this many times per lease period (the runner's
# heartbeat, a compaction's renewal): every ``renewal_interval()`` seconds.
RENEWALS_PER_LEASE = 3
# A holder whose heartbeat is this many renewal intervals old has missed a whole
# renewal: together with an abort it did not answer, it is judged dead (overdue_at).
OVERDUE_RENEWALS = 2


def lease_seconds() -> float:
    return float(settings.FORGE_LEASE_SECONDS)


def renewal_interval() -> float:
    """How often a live holder renews its lease (a third of the lease: two renewals
    can be late before it expires)."""
    return lease_seconds() / RENEWALS_PER_LEASE


def overdue_at(held: SessionLease) -> datetime:
    """When the holder of ``held`` has missed a whole renewal if it has not renewed.

    Read from the lease itself: ``expires_at - heartbeat_at`` is the period the holder
    renews with (its own ``FORGE_LEASE_SECONDS``, which may differ from this
    process's), so the judgment does not depend on the reader's settings. Before the
    lease expires (``OVERDUE_RENEWALS`` of ``RENEWALS_PER_LEASE`` periods), so an
    abort can end a dead holder's turn before the janitor would.
    """
    period = held.expires_at - held.heartbeat_at
    return held.heartbeat_at + period * OVERDUE_RENEWALS / RENEWALS_PER_LEASE


def judged_dead(held: SessionLease, *, now: datetime | None = None) -> bool:
    """Whether the holder of ``held`` is taken for dead: its heartbeat is overdue
    (:func:`overdue_at`), and it is not this process (which is alive, by reading
    this). Only an abort acts on it, and only after the holder did not answer the
    abort: a live runner answers an abort within a second and renews on time."""
    return held.owner != OWNER and (now or timezone.now()) >= overdue_at(held)


@transaction.atomic(savepoint=False)
def acquire(*, session: Session, message_id: str) -> DeadLease | None:
    """Take the session's lease for this process, or raise ``SessionBusy``.

    Returns the expired lease it replaced, if any, so the caller recovers it.

    Part of the prompt's transaction (no savepoint of its own: a refusal rolls
    the whole prompt back). The session row's lock serialises acquirers (the same
    lock writers take: ``FOR NO KEY UPDATE`` on PostgreSQL, the transaction's
    ``BEGIN IMMEDIATE`` on SQLite), so the lease row read under it, in the same
    statement, can be written with one upsert: two statements before every turn.
    Raises ``NotFound`` when the session is not there (or not visible: a lease is
    never taken on a row this transaction cannot see).
    """
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    expires = now + timedelta(seconds=lease_seconds())
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            at, until = adapt(now), adapt(expires)
            cursor.execute(
                _TAKE_ONE,
                [session.pk, session.tenant_id, at, OWNER, message_id, at, at, until, at],
            )
            row = cursor.fetchone()
            if row is None:  # no such session, or one row-level security does not show
                raise NotFound(f"no session {session.pk!r}")
            owner, held_for, taken = row
            if not taken:
                raise _busy(session, now)
            return None if owner is None else DeadLease(owner=owner, message_id=held_for or "")
        cursor.execute(  # SQLite: the transaction's BEGIN IMMEDIATE is the lock
            f"SELECT l.owner, l.message_id, l.expires_at > %s FROM {SESSION} s "
            f"LEFT JOIN {LEASE} l ON l.session_id = s.id WHERE s.id = %s AND s.tenant_id = %s",
            [adapt(now), session.pk, session.tenant_id],
        )
        row = cursor.fetchone()
        if row is None:
            raise NotFound(f"no session {session.pk!r}")
        owner, held_for, live = row
        if owner is not None and live:
            raise _busy(session, now)
        cursor.execute(
            _TAKE,
            [
                session.pk,
                session.tenant_id,
                OWNER,
                message_id,
                adapt(now),
                adapt(now),
                adapt(expires),
            ],
        )
    return None if owner is None else DeadLease(owner=owner, message_id=held_for or "")


def _busy(session: Session, now: datetime) -> SessionBusy:
    """The refusal of a session whose lease is live: with ``retry_after``, the seconds
    until the lease expires, when its holder is taken for dead (:func:`judged_dead`):
    until then every prompt, answer and deletion is refused with no word of when to
    try again (QA). Read only on this path, off the prompt's normal two statements."""
    message = f"session {session.pk} is running a turn; wait for it or abort it"
    held = SessionLease.objects.filter(session_id=session.pk, tenant_id=session.tenant_id).first()
    if held is None or not judged_dead(held, now=now):
        return SessionBusy(message)
    wait = max(1, math.ceil((held.expires_at - now).total_seconds()))
    return SessionBusy(
        f"{message} (its process stopped renewing the lease: the session can be taken "
        f"over in {wait} s)",
        retry_after=wait,
    )


def renew(*, session_id: str, tenant_id: int | None = None) -> datetime | None:
    """Extend our lease; return the expiry written, or None if it is not ours any more
    (taken over after expiring). ``tenant_id``: the session's, which a turn always
    passes (one shard under Citus).

    The expiry, not a yes: the caller counts its lease from when this statement ran,
    which it cannot tell from when the answer reached it (a loop frozen after the
    database ran the renewal took the answer for a fresh lease, and wrote to a reply
    another process had finalized meanwhile: ``heartbeat.renewed_until``)."""
    now = timezone.now()
    expires = now + timedelta(seconds=lease_seconds())
    mine = SessionLease.objects.filter(session_id=session_id, owner=OWNER)
    if tenant_id is not None:
        mine = mine.filter(tenant_id=tenant_id)
    return expires if mine.update(heartbeat_at=now, expires_at=expires) else None


def release(*, session_id: str, tenant_id: int | None = None) -> None:
    """Give the lease back, if it is still ours (one plain statement, after every turn).
    ``tenant_id``: the session's, which a turn always passes (one shard under Citus)."""
    where = "session_id = %s AND owner = %s"
    params: list[str | int] = [session_id, OWNER]
    if tenant_id is not None:
        where, params = where + " AND tenant_id = %s", [*params, tenant_id]
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {LEASE} WHERE {where}", params)


def current(*, session_id: str) -> SessionLease | None:
    return SessionLease.objects.filter(session_id=session_id).first()


def expired_sessions() -> list[str]:
    """Sessions whose lease expired (their runner is gone)."""
    return list(
        SessionLease.objects.filter(expires_at__lte=timezone.now()).values_list(
            "session_id", flat=True
        )
    )


def is_busy(*, session_id: str, tenant_id: int | None = None) -> bool:
    """Whether a live runner (in any process) holds the session's lease (``tenant_id``:
    the session's, so that the query stays on one shard under Citus)."""
    live = SessionLease.objects.filter(session_id=session_id, expires_at__gt=timezone.now())
    if tenant_id is not None:
        live = live.filter(tenant_id=tenant_id)
    return live.exists()


def with_busy(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """``sessions`` annotated with ``busy`` (a live lease), in the same query."""
    live = SessionLease.objects.filter(
        session=OuterRef("pk"), tenant=OuterRef("tenant"), expires_at__gt=timezone.now()
    )
    return sessions.annotate(busy=Exists(live))


def delete_session(*, session: Session) -> None:
    """Delete a session, with its log, unless a turn runs in it (``SessionBusy``, 409).

    The lease is taken in the deleting transaction, under the session row's lock, as a
    prompt, an approval's resumption and a compaction take it: whichever comes second
    finds the session busy or gone (``NotFound``). A check of the lease before the
    deletion, outside that lock, let a prompt and a deletion both succeed, and the
    turn then failed on a session that was no more. A lease left by a dead runner is
    taken over: its open reply is finalized as recovery does (billed: deleted open, it
    was never counted, its finished steps nor the one cut), then goes with the log."""
    with transaction.atomic():
        if acquire(session=session, message_id=new_message_id()) is not None:
            from .recovery import finalize_dead_turn  # (recovery sits above this module)

            finalize_dead_turn(session)
        services.delete_session(session=session)
