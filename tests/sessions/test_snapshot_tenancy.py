"""Context snapshots under row-level security (PostgreSQL): the application role
stores and reads a session's snapshot in its tenant's scope, sees none of another
tenant's, and cannot write one into another tenant."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.utils import ProgrammingError

from accounts import tenancy
from accounts.selectors import tenant_for_user
from sessions import snapshots
from sessions.services import create_session

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def test_snapshots_are_tenant_owned(user, other_user, as_app_role):
    mine, theirs = tenant_for_user(user), tenant_for_user(other_user)
    with tenancy.scope([mine.pk]):
        session = create_session(user=user, title="mine")
        snapshots.write(
            tenant_id=mine.pk, session_id=session.pk, seq=1, hash="ab" * 32, version=1,
            state=b"x",
        )  # fmt: skip
        assert snapshots.read(tenant_id=mine.pk, session_id=session.pk) is not None
    with tenancy.scope([theirs.pk]), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM forge_sessions_contextsnapshot")
        assert cursor.fetchone()[0] == 0
    with (
        tenancy.scope([mine.pk]),
        pytest.raises(ProgrammingError, match="row-level security"),
        transaction.atomic(),
    ):
        snapshots.write(
            tenant_id=theirs.pk, session_id=session.pk, seq=2, hash="cd" * 32, version=1,
            state=b"y",
        )  # fmt: skip
