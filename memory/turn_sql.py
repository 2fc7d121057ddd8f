"""Hand-written SQL for a turn's memory work: the runtime's per-turn path.

Every turn records its exchange in the speaker's window (:func:`append_window`, one
statement on PostgreSQL) and reads whether the speaker has a rolled unit
(:func:`history_unit`), so neither pays the ORM's per-query compile cost; a
regenerated answer takes its predecessor's place (:func:`replace_in_window`). The
rolling's own statements are in :mod:`memory.sql`, whose tables and dialect these share.

Every value is a bound parameter; table and column names come from the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.backends.utils import CursorWrapper

from .normalize import Msg
from .sql import CORE, UNIT, WINDOW, Dialect


def replace_in_window(
    cursor: CursorWrapper,
    dialect: Dialect,
    *,
    tenant_id: int,
    user_id: int,
    agent: str,
    replaced: str,
    message: Msg,
    now: datetime,
) -> bool:
    """Put ``message`` in the place of the window's message ``replaced`` (a message id of
    ``message``'s session) in the core of (tenant, user, agent), if the window still holds
    it unrolled (``seq >= rolled_seq``), and mark the interaction; False, with nothing
    written, otherwise. Its seq stays: the window remains the run of seqs rolling counts
    on. Two statements; call it inside a transaction."""
    core = f"SELECT id FROM {CORE} WHERE tenant_id = %s AND user_id = %s AND agent = %s"
    rolled = f"SELECT rolled_seq FROM {CORE} WHERE tenant_id = %s AND user_id = %s AND agent = %s"
    who: list[Any] = [tenant_id, user_id, agent]
    cursor.execute(
        f"UPDATE {WINDOW} SET role = %s, text = %s, at = %s, message_id = %s "
        f"WHERE tenant_id = %s AND core_id = ({core}) AND seq >= ({rolled}) "
        "AND session_id = %s AND message_id = %s",
        [
            message.role,
            message.text,
            dialect.time(message.at),
            message.message_id,
            tenant_id,
            *who,
            *who,
            message.session_id,
            replaced,
        ],
    )
    if cursor.rowcount <= 0:
        return False
    cursor.execute(
        f"UPDATE {CORE} SET last_interaction_at = %s "
        "WHERE tenant_id = %s AND user_id = %s AND agent = %s",
        [dialect.time(now), *who],
    )
    return True


def _membership_table() -> str:
    from accounts.models import Membership

    return Membership._meta.db_table


def append_window(
    cursor: CursorWrapper,
    dialect: Dialect,
    *,
    tenant_id: int,
    user_id: int,
    agent: str,
    messages: Sequence[Msg],
    now: datetime,
) -> bool:
    """Append ``messages`` (oldest first) to the window of the existing core of
    (tenant, user, agent) whose user is still a member of the tenant, and advance
    the core's counters: one statement on PostgreSQL (a data-modifying CTE: the
    ``UPDATE`` takes the core's row lock, so concurrent turns queue on it and the
    seqs it returns are theirs alone), two on SQLite (the transaction's
    ``BEGIN IMMEDIATE`` is the lock). False, with nothing written, when there is no
    such core (its first turn creates it: ``services.append_dialogue``) or the user
    is no member. Call it inside a transaction, with at least one message.
    """
    count = len(messages)
    member = (
        f"EXISTS (SELECT 1 FROM {_membership_table()} mb "
        "WHERE mb.tenant_id = c.tenant_id AND mb.user_id = c.user_id)"
    )
    where = f"c.tenant_id = %s AND c.user_id = %s AND c.agent = %s AND {member}"
    values: list[Any] = []
    for i, m in enumerate(messages):
        values += [i, m.role, m.text, dialect.time(m.at), m.session_id, m.message_id]
    at = dialect.time(now)
    columns = "tenant_id, core_id, seq, role, text, at, session_id, message_id"
    if dialect.postgres:
        rows = ", ".join(["(CAST(%s AS bigint), %s, %s, CAST(%s AS timestamptz), %s, %s)"] * count)
        cursor.execute(
            f"WITH c AS (UPDATE {CORE} c SET window_next_seq = c.window_next_seq + %s, "
            "window_count = c.window_count + %s, last_interaction_at = %s "
            f"WHERE {where} RETURNING c.id, c.tenant_id, c.window_next_seq - %s AS start) "
            f"INSERT INTO {WINDOW} ({columns}) "
            "SELECT c.tenant_id, c.id, c.start + v.i, v.role, v.text, v.at, v.session_id, "
            f"v.message_id FROM c, (VALUES {rows}) AS v (i, role, text, at, session_id, "
            "message_id)",
            [count, count, at, tenant_id, user_id, agent, count, *values],
        )
        return cursor.rowcount > 0
    rows = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * count)
    cursor.execute(
        f"INSERT INTO {WINDOW} ({columns}) "
        "SELECT c.tenant_id, c.id, c.window_next_seq + v.column1, v.column2, v.column3, "
        f"v.column4, v.column5, v.column6 FROM {CORE} c, (VALUES {rows}) AS v WHERE {where}",
        [*values, tenant_id, user_id, agent],
    )
    if cursor.rowcount <= 0:
        return False
    cursor.execute(
        f"UPDATE {CORE} SET window_next_seq = window_next_seq + %s, "
        "window_count = window_count + %s, last_interaction_at = %s "
        "WHERE tenant_id = %s AND user_id = %s AND agent = %s",
        [count, count, at, tenant_id, user_id, agent],
    )
    return True


def history_unit(
    cursor: CursorWrapper, *, tenant_id: int, user_id: int, agent: str
) -> tuple[str | None, str | None]:
    """The dialog_history check of a turn's start, in one statement: the id of the core
    of (tenant, user, agent) (None: no core) and of its most recently updated unit that
    has slices (None: the core has not rolled yet, so it has no ``dialog_history``
    block). ``selectors.dialog_history_block`` picks the same unit."""
    cursor.execute(
        f"SELECT c.id, (SELECT u.id FROM {UNIT} u WHERE u.core_id = c.id AND u.tenant_id = "
        "c.tenant_id AND u.slice_count > 0 ORDER BY u.updated_at DESC, u.id DESC LIMIT 1) "
        f"FROM {CORE} c WHERE c.tenant_id = %s AND c.user_id = %s AND c.agent = %s",
        [tenant_id, user_id, agent],
    )
    row = cursor.fetchone()
    return (None, None) if row is None else (row[0], row[1])
