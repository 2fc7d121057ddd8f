"""One runner per session: a lease row in the database.

A process that starts a turn takes the session's lease (owner, heartbeat,
expiry) and renews it while the turn runs; another process's prompt is refused
as busy. A lease whose owner died (no renewal) expires after
``FORGE_LEASE_SECONDS``; whoever finds it expired finalizes the turn it left
open before starting a new one.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from forge.errors import SessionBusy
from forge.models import SessionLease
from sessions.models import Session

# This process's identity as a lease owner.
OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class DeadLease:
    """A lease found expired when taking the session: its turn was left open."""

    owner: str
    message_id: str


def lease_seconds() -> float:
    return float(settings.FORGE_LEASE_SECONDS)


@transaction.atomic(savepoint=False)
def acquire(*, session: Session, message_id: str) -> DeadLease | None:
    """Take the session's lease for this process, or raise ``SessionBusy``.

    Returns the expired lease it replaced, if any, so the caller recovers it.

    Part of the prompt's transaction (no savepoint of its own: a refusal rolls
    the whole prompt back). The session row's lock serialises acquirers, so the
    lease row read under it can be inserted or updated plainly, without
    ``update_or_create``'s savepoints and second lock: this runs before every turn.
    """
    now = timezone.now()
    # Serialise acquirers of one session on its row (the same lock writers take).
    Session.objects.select_for_update(no_key=True).filter(pk=session.pk).values("pk").first()
    current = SessionLease.objects.filter(session_id=session.pk).first()
    if current is not None and current.expires_at > now:
        raise SessionBusy(f"session {session.pk} is running a turn; wait for it or abort it")
    held = {
        "owner": OWNER,
        "message_id": message_id,
        "acquired_at": now,
        "heartbeat_at": now,
        "expires_at": now + timedelta(seconds=lease_seconds()),
    }
    if current is None:
        SessionLease.objects.create(session_id=session.pk, **held)
        return None
    SessionLease.objects.filter(session_id=session.pk).update(**held)
    return DeadLease(owner=current.owner, message_id=current.message_id)


def renew(*, session_id: str) -> bool:
    """Extend our lease; False if it is not ours any more (taken over after expiring)."""
    now = timezone.now()
    return bool(
        SessionLease.objects.filter(session_id=session_id, owner=OWNER).update(
            heartbeat_at=now, expires_at=now + timedelta(seconds=lease_seconds())
        )
    )


def release(*, session_id: str) -> None:
    SessionLease.objects.filter(session_id=session_id, owner=OWNER).delete()


def current(*, session_id: str) -> SessionLease | None:
    return SessionLease.objects.filter(session_id=session_id).first()


def expired_sessions() -> list[str]:
    """Sessions whose lease expired (their runner is gone)."""
    return list(
        SessionLease.objects.filter(expires_at__lte=timezone.now()).values_list(
            "session_id", flat=True
        )
    )


def is_busy(*, session_id: str) -> bool:
    """Whether a live runner (in any process) holds the session's lease."""
    return SessionLease.objects.filter(
        session_id=session_id, expires_at__gt=timezone.now()
    ).exists()


def with_busy(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """``sessions`` annotated with ``busy`` (a live lease), in the same query."""
    live = SessionLease.objects.filter(session=OuterRef("pk"), expires_at__gt=timezone.now())
    return sessions.annotate(busy=Exists(live))
