"""Hand-written SQL for what every turn reads, beside the append path's writes
(``sessions.sql``).

Each function is one plain statement doing what a selector does through the ORM, so
that a turn compiles no ORM query (issue 20): the selector stays the reference, and
``tests/runtime/test_turn_sql.py`` checks each against it on both engines. The
statements name the session's tenant, as the append path's do, so that under Citus
each is routed to one shard.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.backends.utils import CursorWrapper

from .models import wire_data_sql
from .sql import EVENT, MESSAGE, PART, Dialect


def read_messages(
    cursor: CursorWrapper,
    dialect: Dialect,
    *,
    tenant_id: int,
    session_id: str,
    message_ids: list[str],
) -> dict[str, dict[str, Any]]:
    """``selectors.messages_by_id`` in one plain statement: the messages ``message_ids``
    of the session, ``{id: {info, parts}}`` (parts by id; missing ids left out), for
    the runtime recording a finished exchange on every turn. The parts are sought by
    message only (index ``part_message_id``; a session filter lets SQLite's planner
    scan the session's every part, see ``selectors.with_parts``) and kept to the
    messages found in this session."""
    marks = ", ".join(["%s"] * len(message_ids))
    data = wire_data_sql("e.", postgres=dialect.postgres)  # the wire form (models)
    cursor.execute(
        f"SELECT 0, m.id, m.id, {data} FROM {MESSAGE} m JOIN {EVENT} e "
        "ON e.session_id = m.session_id AND e.seq = m.seq AND e.tenant_id = m.tenant_id "
        f"WHERE m.session_id = %s AND m.tenant_id = %s AND m.id IN ({marks}) "
        f"UNION ALL SELECT 1, p.message_id, p.id, {data} FROM {PART} p JOIN {EVENT} e "
        "ON e.session_id = p.session_id AND e.seq = p.seq AND e.tenant_id = p.tenant_id "
        f"WHERE p.tenant_id = %s AND p.message_id IN ({marks}) "
        "ORDER BY 1, 2, 3",
        [session_id, tenant_id, *message_ids, tenant_id, *message_ids],
    )
    found: dict[str, dict[str, Any]] = {}
    for kind, message_id, _, data in cursor.fetchall():
        if isinstance(data, str):
            data = json.loads(data)
        if kind == 0:
            found[message_id] = {"info": data, "parts": []}
        elif message_id in found:
            found[message_id]["parts"].append(data)
    return found


# The condition of the partial index ``sessionevent_context`` as literal SQL (SQLite
# uses a partial index only when the query repeats it; see
# ``selectors.context._CONTEXT_INDEX_CONDITION``).
_CONTEXT_EVENTS = "c.type IN ('context.updated', 'session.compacted')"


def last_step_tokens(
    cursor: CursorWrapper,
    dialect: Dialect,
    *,
    tenant_id: int,
    session_id: str,
    stale_after_blocks: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """``selectors.last_step_tokens`` in one plain statement, before every model step:
    the newest ``step-finish`` part's data (index ``part_session_id``, read back), with
    the data of the context events logged after it (their partial index): None when
    one of them is a ``session.compacted`` or a ``context.updated`` holding a block of
    a kind in ``stale_after_blocks``."""
    agg = (
        "json_agg(json_build_array(c.type, c.data))"
        if dialect.postgres
        else ("json_group_array(json_array(c.type, json(c.data)))")
    )
    cursor.execute(
        f"SELECT e.data, (SELECT {agg} FROM {EVENT} c WHERE c.session_id = p.session_id "
        f"AND c.tenant_id = p.tenant_id AND {_CONTEXT_EVENTS} AND c.seq > p.seq) "
        f"FROM {PART} p JOIN {EVENT} e ON e.session_id = p.session_id AND e.seq = p.seq "
        "AND e.tenant_id = p.tenant_id "
        "WHERE p.tenant_id = %s AND p.session_id = %s AND p.type = 'step-finish' "
        "ORDER BY p.id DESC LIMIT 1",
        [tenant_id, session_id],
    )
    row = cursor.fetchone()
    if row is None:
        return None
    data, later = row
    if isinstance(data, str):
        data = json.loads(data)
    if isinstance(later, str):
        later = json.loads(later)
    for kind, update in later or ():
        if kind == "session.compacted":
            return None
        if kind == "context.updated" and stale_after_blocks and isinstance(update, dict):
            blocks = update.get("blocks") or []
            if any(isinstance(b, dict) and b.get("kind") in stale_after_blocks for b in blocks):
                return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    return tokens if isinstance(tokens, dict) else None


def context_updates(
    cursor: CursorWrapper, dialect: Dialect, *, tenant_id: int, session_id: str
) -> list[dict[str, Any]]:
    """``selectors.context_updates`` (every ``context.updated`` event's data, oldest
    first) in one plain statement through the partial index: every prompt reads it
    to log only the context blocks that changed."""
    cursor.execute(
        f"SELECT c.data FROM {EVENT} c WHERE c.session_id = %s AND c.tenant_id = %s "
        f"AND {_CONTEXT_EVENTS} AND c.type = 'context.updated' ORDER BY c.seq",
        [session_id, tenant_id],
    )
    return [json.loads(d) if isinstance(d, str) else d for (d,) in cursor.fetchall()]
