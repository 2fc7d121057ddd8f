"""What a copy (a fork, an import's copy) was copied from (``CopiedMessage``), read
for the runtime's cut of a copy's rolled turns (``forge.runtime.dialogue``)."""

from __future__ import annotations

from django.db import connection

from accounts.models import Tenant

from ..models import CopiedMessage, Session

# The copy's distinct sources, one index probe each (a loose index scan: neither engine
# skips through an index for DISTINCT), not one index entry per copied message.
_COPY_SOURCES_SQL = f"""
WITH RECURSIVE src (id) AS (
    SELECT MIN(source_session_id) FROM {CopiedMessage._meta.db_table}
    WHERE session_id = %s AND tenant_id = %s
    UNION ALL
    SELECT (SELECT MIN(c.source_session_id) FROM {CopiedMessage._meta.db_table} c
            WHERE c.session_id = %s AND c.tenant_id = %s AND c.source_session_id > src.id)
    FROM src WHERE src.id IS NOT NULL
)
SELECT id FROM src WHERE id IS NOT NULL
"""  # noqa: S608 (the table's name only)


def copy_sources(*, tenant: Tenant, session: Session) -> list[str]:
    """The ids of the sessions the messages of ``session`` (a fork, an import's copy)
    were copied from (:class:`~sessions.models.CopiedMessage`), every source up a chain
    of copies; empty for a session that copied nothing. One statement, one probe of the
    index ``copiedmessage_source`` per source."""
    params: list[str | int] = [session.pk, tenant.pk, session.pk, tenant.pk]
    with connection.cursor() as cursor:
        cursor.execute(_COPY_SOURCES_SQL, params)
        return [source for (source,) in cursor.fetchall()]


def copy_through(
    *,
    tenant: Tenant,
    session: Session,
    source_session_id: str,
    through: str,
    before: str | None = None,
) -> str | None:
    """The id of the newest message of ``session`` copied from a message of session
    ``source_session_id`` whose id is ``<= through`` (below ``before``, a message id of
    ``session``, when given); None: none is. Copies' ids keep their originals' order,
    so it is the copy of the newest such original. One backward walk of the index
    ``copiedmessage_source``."""
    rows = CopiedMessage.objects.filter(
        tenant=tenant,
        session_id=session.pk,
        source_session_id=source_session_id,
        source_message_id__lte=through,
    )
    if before is not None:
        rows = rows.filter(message_id__lt=before)
    newest: str | None = (
        rows.order_by("-source_message_id").values_list("message_id", flat=True).first()
    )
    return newest


def copy_origins(
    *, tenant: Tenant, session: Session, after: str | None, upto: str
) -> dict[str, list[tuple[str, str]]]:
    """``{copy's message id: [(source session id, source message id), ...]}`` for the
    messages of ``session`` copied from elsewhere whose id is above ``after`` (None:
    from the first) and at most ``upto``: every origin up a chain of copies. Read for
    the cut of a copy (``forge.runtime.dialogue``), when it moves."""
    rows = CopiedMessage.objects.filter(tenant=tenant, session_id=session.pk, message_id__lte=upto)
    if after is not None:
        rows = rows.filter(message_id__gt=after)
    origins: dict[str, list[tuple[str, str]]] = {}
    for message_id, source_session, source_message in rows.values_list(
        "message_id", "source_session_id", "source_message_id"
    ):
        origins.setdefault(message_id, []).append((source_session, source_message))
    return origins
