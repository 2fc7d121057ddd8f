"""What each message of a copy was copied from (``CopiedMessage``): recorded by a fork
and an import's copy in their transaction, composed up a chain of copies, read by the
runtime's cut (``selectors.copy_through``); beside the log, so neither exported nor
imported, kept by a rebuild of the projections, deleted with the copy."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from sessions import selectors, services
from sessions.models import CopiedMessage

from .script import drive

pytestmark = pytest.mark.django_db


def ids(session: Any) -> list[str]:
    history = selectors.iter_history(tenant=session.tenant, session_id=session.pk)
    return [item["info"]["id"] for item in history]


def origins(copy: Any) -> dict[tuple[str, str], str]:
    """``{(copy's message id, source session id): source message id}``."""
    rows = CopiedMessage.objects.filter(session_id=copy.pk).values_list(
        "message_id", "source_session_id", "source_message_id"
    )
    return {(m, s): o for m, s, o in rows}


def fork(session: Any, user: Any, before: str) -> Any:
    return services.fork_session(session=session, user=user, before_message_id=before)


def test_a_fork_records_the_original_of_each_copied_message(session, user):
    drive(session, turns=2)
    source = ids(session)
    copy = fork(session, user, source[-1])
    held = ids(copy)
    assert origins(copy) == {(c, session.pk): o for c, o in zip(held, source[:-1], strict=True)}
    tenant = session.tenant
    assert selectors.copy_sources(tenant=tenant, session=copy) == [session.pk]
    assert selectors.copy_sources(tenant=tenant, session=session) == []
    through = selectors.copy_through(
        tenant=tenant, session=copy, source_session_id=session.pk, through=source[1]
    )
    assert through == held[1]
    assert (
        selectors.copy_through(
            tenant=tenant,
            session=copy,
            source_session_id=session.pk,
            through=source[1],
            before=held[1],
        )
        == held[0]
    )
    assert (
        selectors.copy_through(
            tenant=tenant, session=copy, source_session_id=session.pk, through=source[0] + "!"
        )
        == held[0]
    )
    older = "msg_0"  # below every id
    assert (
        selectors.copy_through(
            tenant=tenant, session=copy, source_session_id=session.pk, through=older
        )
        is None
    )


def test_a_copy_of_a_copy_maps_back_to_every_source(session, user):
    drive(session, turns=2)
    source = ids(session)
    first = fork(session, user, source[-1])
    drive(first, turns=1)  # the first fork's own turn, copied by the second
    held = ids(first)
    second = fork(first, user, held[-1])
    copied = ids(second)
    mapped = origins(second)
    assert {s for _, s in mapped} == {session.pk, first.pk}
    assert [mapped[(c, first.pk)] for c in copied] == held[:-1]
    # the first fork's copies map to the source, its own messages to nothing further
    assert [mapped.get((c, session.pk)) for c in copied] == [
        *source[:-1],
        *[None] * (len(copied) - len(source) + 1),
    ]
    tenant = session.tenant
    assert sorted(selectors.copy_sources(tenant=tenant, session=second)) == sorted(
        [session.pk, first.pk]
    )
    # an import's copy of the second fork's export, here: the chain goes on
    lines = list(selectors.export_lines(session=second))
    imported = services.import_log(user=user, events=services.parse_log(lines), copy=True)
    assert sorted(selectors.copy_sources(tenant=tenant, session=imported)) == sorted(
        [session.pk, first.pk, second.pk]
    )
    assert len(origins(imported)) == len(mapped) + len(copied)


def test_the_origins_are_beside_the_log_and_go_with_the_copy(session, user, tmp_path):
    drive(session, turns=2)
    copy = fork(session, user, ids(session)[-1])
    count = CopiedMessage.objects.filter(session_id=copy.pk).count()
    assert count == len(ids(copy))
    call_command("rebuild_projections", "--session", copy.pk)  # a projection's rebuild keeps them
    assert CopiedMessage.objects.filter(session_id=copy.pk).count() == count
    lines = list(selectors.export_lines(session=copy))
    assert not any("copiedmessage" in line.lower() for line in lines)
    services.delete_session(session=session)  # the source gone: the copy keeps its origins
    assert CopiedMessage.objects.filter(session_id=copy.pk).count() == count
    # an import keeping the ids (the copy deleted first, so they are free) carries none
    services.delete_session(session=copy)
    assert not CopiedMessage.objects.exists()
    again = services.import_log(user=user, events=services.parse_log(lines))
    assert again.pk == copy.pk
    assert not CopiedMessage.objects.exists()


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_origins_are_tenant_owned(user, other_user, as_app_role):
    from django.db import connection, transaction
    from django.db.utils import ProgrammingError

    from accounts import tenancy
    from accounts.selectors import tenant_for_user

    mine, theirs = tenant_for_user(user), tenant_for_user(other_user)
    with tenancy.scope([mine.pk]):
        source = services.create_session(user=user, title="mine")
        drive(source, turns=1)
        copy = fork(source, user, ids(source)[-1])
        assert CopiedMessage.objects.filter(session_id=copy.pk).exists()
    with tenancy.scope([theirs.pk]), connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM forge_sessions_copiedmessage")
        assert cursor.fetchone()[0] == 0
    with (
        tenancy.scope([mine.pk]),
        pytest.raises(ProgrammingError, match="row-level security"),
        transaction.atomic(),
    ):
        CopiedMessage.objects.create(
            tenant_id=theirs.pk,
            session_id=copy.pk,
            message_id="msg_x",
            source_session_id=source.pk,
            source_message_id="msg_y",
        )
