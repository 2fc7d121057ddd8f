"""The session lease's plain SQL (forge/runtime/lease.py), on both engines: one runner
per session, an expired lease handed over with what it held, a release that gives
back only our own lease."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from forge.errors import SessionBusy
from forge.models import SessionLease
from forge.runtime import lease
from sessions.exceptions import NotFound
from sessions.models import Session

pytestmark = pytest.mark.django_db


def test_acquire_takes_a_free_session_and_refuses_a_second_runner(session):
    assert lease.acquire(session=session, message_id="msg_a") is None
    held = SessionLease.objects.get(session_id=session.pk)
    assert (held.owner, held.message_id) == (lease.OWNER, "msg_a")
    assert held.acquired_at == held.heartbeat_at
    assert held.expires_at - held.acquired_at == timedelta(seconds=lease.lease_seconds())
    assert held.expires_at > timezone.now()
    with pytest.raises(SessionBusy), transaction.atomic():  # the caller's transaction
        lease.acquire(session=session, message_id="msg_b")
    assert SessionLease.objects.get(session_id=session.pk).message_id == "msg_a"
    assert lease.is_busy(session_id=session.pk)


def test_an_expired_lease_is_taken_over_and_returned_for_recovery(session):
    past = timezone.now() - timedelta(seconds=5)
    SessionLease.objects.create(
        session_id=session.pk,
        tenant_id=session.tenant_id,
        owner="dead-host:1:abc",
        message_id="msg_cut",
        acquired_at=past - timedelta(seconds=60),
        heartbeat_at=past - timedelta(seconds=60),
        expires_at=past,
    )
    dead = lease.acquire(session=session, message_id="msg_new")
    assert dead == lease.DeadLease(owner="dead-host:1:abc", message_id="msg_cut")
    held = SessionLease.objects.get(session_id=session.pk)
    assert (held.owner, held.message_id) == (lease.OWNER, "msg_new")
    assert held.expires_at > timezone.now()
    assert SessionLease.objects.filter(session_id=session.pk).count() == 1


def test_release_gives_back_only_our_own_lease(session):
    lease.acquire(session=session, message_id="msg_a")
    SessionLease.objects.filter(session_id=session.pk).update(owner="other-host:2:def")
    lease.release(session_id=session.pk)
    assert SessionLease.objects.filter(session_id=session.pk).exists()  # not ours
    SessionLease.objects.filter(session_id=session.pk).update(owner=lease.OWNER)
    lease.release(session_id=session.pk)
    assert not SessionLease.objects.filter(session_id=session.pk).exists()
    assert lease.acquire(session=session, message_id="msg_b") is None  # free again


def test_a_refused_acquire_inside_a_prompt_transaction_rolls_it_back(session):
    lease.acquire(session=session, message_id="msg_a")
    with pytest.raises(SessionBusy), transaction.atomic():
        Session.objects.filter(pk=session.pk).update(title="changed")
        lease.acquire(session=session, message_id="msg_b")
    assert Session.objects.get(pk=session.pk).title == "First chat"


def test_acquire_on_a_missing_session_is_not_found_and_takes_nothing(session):
    ghost = Session(pk="ses_missing", tenant=session.tenant)
    with pytest.raises(NotFound), transaction.atomic():
        lease.acquire(session=ghost, message_id="msg_a")
    assert not SessionLease.objects.filter(session_id="ses_missing").exists()


def test_deleting_takes_the_lease_so_a_turn_and_a_deletion_never_both_win(session):
    """A third-round finding: ``DELETE`` checked the lease and then deleted, outside the
    session row's lock; a prompt (or an approval, or a compaction) that took the lease
    in between also succeeded, and its turn failed on a session that was gone. Now the
    deletion takes the lease under that lock: a live one makes it 409 ``busy``."""
    from sessions.models import SessionEvent

    with transaction.atomic():
        lease.acquire(session=session, message_id="msg_running")  # a turn runs
    with pytest.raises(SessionBusy):
        lease.delete_session(session=session)
    assert Session.objects.filter(pk=session.pk).exists()
    # a runner that died: its lease expired, the deletion takes it over
    SessionLease.objects.filter(session=session).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    lease.delete_session(session=session)
    assert not Session.objects.filter(pk=session.pk).exists()
    assert not SessionEvent.objects.filter(session_id=session.pk).exists()
    assert not SessionLease.objects.exists()
    # and a prompt that comes second finds it gone
    with pytest.raises(NotFound), transaction.atomic():
        lease.acquire(session=session, message_id="msg_late")


def test_a_title_that_comes_after_the_deletion_is_no_error(session, caplog):
    """A third-round finding: the background title task logged an ERROR with a
    traceback when its session was deleted while the small model answered."""
    import logging

    from forge.runtime.title import _set_title
    from sessions.services import delete_session

    delete_session(session=session)
    with caplog.at_level(logging.DEBUG, logger="forge.runtime.title"):
        _set_title(session, "Too late")
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
