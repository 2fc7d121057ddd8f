"""The Citus keys' migrations move an existing database forward: rows written under the
schema before them (forge 0006, sessions 0011, memory 0007) keep their values and
relations, the lease takes its session's tenant, and the keys end as designed
(``forge.db.citus``). The database is left at the latest migration."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts.services import create_user
from forge.db import citus
from sessions import selectors

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

BEFORE = [
    ("forge", "0006_usage_budgets"),
    ("forge_sessions", "0011_context_snapshot"),
    ("memory", "0007_rolling_message_constraints"),
]
AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GENESIS = "0" * 64


def _migrate(target: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _insert(cursor: Any, table: str, **columns: Any) -> None:
    names = ", ".join(columns)
    marks = ", ".join(
        "CAST(%s AS jsonb)" if n == "data" and table.endswith("event") else "%s" for n in columns
    )
    values = [json.dumps(v) if isinstance(v, dict) else v for v in columns.values()]
    cursor.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", values)


def _hash(seq: int) -> bytes:
    return bytes([seq]) * 32


def _old_rows(cursor: Any, *, tenant: int, user: int, tag: str) -> None:
    """One tenant's rows, written as the schema before the migrations holds them: a
    session and a forked child with their log and projections, a context snapshot, a
    running turn's lease (no tenant column yet), a memory core with its window, a unit,
    its messages, a slice and its vectors, usage and budgets."""
    session, child = f"ses_{tag}", f"ses_{tag}_child"
    for sid, parent in ((session, None), (child, session)):
        _insert(
            cursor,
            "forge_sessions_session",
            id=sid,
            tenant_id=tenant,
            user_id=user,
            parent_id=parent,
            title=f"title {sid}",
            agent="build",
            created_at=AT,
            updated_at=AT,
            deleting=False,
            chat_alias=f"chat_{sid}",
        )
        user_msg, reply, text = f"msg_{sid}_1", f"msg_{sid}_2", f"prt_{sid}_1"
        events = [
            ("session.created", {"id": sid, "title": f"title {sid}"}),
            ("message.updated", {"id": user_msg, "role": "user", "session_id": sid}),
            ("message.updated", {"id": reply, "role": "assistant", "session_id": sid}),
            ("part.updated", {"id": text, "message_id": reply, "type": "text", "text": "hi"}),
        ]
        for seq, (kind, data) in enumerate(events, start=1):
            _insert(
                cursor,
                "forge_sessions_sessionevent",
                id=f"evt_{sid}_{seq}",
                tenant_id=tenant,
                session_id=sid,
                seq=seq,
                type=kind,
                at=AT + timedelta(seconds=seq),
                data=data,
                hash=_hash(seq),
            )
        _insert(
            cursor,
            "forge_sessions_message",
            id=user_msg,
            tenant_id=tenant,
            session_id=sid,
            role="user",
            seq=2,
        )
        _insert(
            cursor,
            "forge_sessions_message",
            id=reply,
            tenant_id=tenant,
            session_id=sid,
            role="assistant",
            seq=3,
        )
        _insert(
            cursor,
            "forge_sessions_part",
            id=text,
            tenant_id=tenant,
            session_id=sid,
            message_id=reply,
            type="text",
            seq=4,
        )
    _insert(
        cursor,
        "forge_sessions_contextsnapshot",
        session_id=session,
        tenant_id=tenant,
        seq=4,
        hash=_hash(4),
        version=1,
        state=b"snapshot",
    )
    _insert(
        cursor,
        "forge_sessionlease",
        session_id=session,
        owner="host:1:abc",
        message_id=f"msg_{session}_2",
        acquired_at=AT,
        heartbeat_at=AT,
        expires_at=AT + timedelta(seconds=15),
    )
    core, unit, slice_ = f"core_{tag}", f"unit_{tag}", f"slc_{tag}"
    _insert(
        cursor,
        "memory_memorycore",
        id=core,
        tenant_id=tenant,
        user_id=user,
        agent="build",
        memory_session_id=f"mses_{tag}",
        created_at=AT,
        last_interaction_at=AT,
        window_count=1,
        window_next_seq=3,
        rolled_seq=2,
        rolled_at=AT,
    )
    _insert(
        cursor,
        "memory_dialoguemessage",
        tenant_id=tenant,
        core_id=core,
        seq=2,
        role="user",
        text="still in the window",
        at=AT,
        session_id=session,
        message_id=f"msg_{session}_1",
    )
    _insert(
        cursor,
        "memory_memoryunit",
        id=unit,
        tenant_id=tenant,
        core_id=core,
        memory_session_id=f"mses_{tag}",
        created_at=AT,
        updated_at=AT,
        message_count=2,
        slice_count=1,
    )
    for index, role in enumerate(("user", "assistant")):
        _insert(
            cursor,
            "memory_memorymessage",
            tenant_id=tenant,
            unit_id=unit,
            index=index,
            role=role,
            text=f"rolled {role}",
            at=AT,
            session_id=session,
            message_id=f"msg_{session}_{index + 1}",
        )
    _insert(
        cursor,
        "memory_memoryslice",
        id=slice_,
        tenant_id=tenant,
        unit_id=unit,
        start_index=0,
        end_index=2,
        summary=f"summary {tag}",
        created_at=AT,
        indexed=False,
    )
    _insert(
        cursor,
        "memory_memoryvectors",
        tenant_id=tenant,
        core_id=core,
        slice_id=slice_,
        model="offline",
        dim=2,
        rows=3,
        start_index=0,
        data=b"\0" * 12,
        created_at=AT,
    )
    counters = dict.fromkeys(
        (
            "turns",
            "steps",
            "input_tokens",
            "output_tokens",
            "reasoning_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cost_nanos",
            "failed",
            "aborted",
            "tool_calls",
        ),
        3,
    )
    _insert(
        cursor,
        "forge_usage",
        tenant_id=tenant,
        user_id=user,
        agent="build",
        model="offline/echo",
        day=date(2026, 11, 30),
        **counters,
    )
    _insert(
        cursor,
        "forge_budget",
        tenant_id=tenant,
        user_id=None,
        monthly_tokens=1000,
        monthly_cost=None,
    )
    _insert(
        cursor,
        "forge_budget",
        tenant_id=tenant,
        user_id=user,
        monthly_tokens=100,
        monthly_cost=None,
    )


# The distributed tables that exist before the keys migration (forge_retiredusage and
# forge_sideusage came after it, keyed by their own migrations, and are checked by
# citus.problems below).
# The tables created after the keys migration (empty before it: nothing to carry).
SINCE = ("forge_retiredusage", "forge_sideusage", "forge_sessions_copiedmessage")
TABLES = [t for t in citus.DISTRIBUTED if t not in SINCE]


# The columns added by the keys migration and after it: the lease's (budget
# reservations), the session's (the seq through which its log is a copy), memory's
# history digest (a core's digest, a slice's ``digested``).
COLUMNS_SINCE = {
    "forge_sessionlease": ("tenant_id", "reserved_by", "reserved_tokens", "reserved_cost_nanos"),
    "forge_sessions_session": ("copied_through",),
    "memory_memorycore": ("history_digest", "history_digest_at"),
    "memory_memoryslice": ("digested",),
}


def _snapshot(cursor: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every distributed table, but the columns added since, sorted."""
    rows = {}
    for table in TABLES:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "AND column_name NOT IN ('search_document') ORDER BY column_name",
            [table],
        )
        columns = [c for (c,) in cursor.fetchall() if c not in COLUMNS_SINCE.get(table, ())]
        cursor.execute(f"SELECT {', '.join(columns)} FROM {table}")
        rows[table] = sorted(
            (
                tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                for row in cursor.fetchall()
            ),
            key=repr,
        )
    return rows


def _keys(cursor: Any) -> dict[str, str]:
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = 'public'::regnamespace AND contype IN ('p', 'u', 'f')"
    )
    return dict(cursor.fetchall())


def test_existing_rows_move_forward_with_their_relations_and_the_new_keys():
    acme, acme_user = _tenant_user("acme")
    globex, globex_user = _tenant_user("globex")
    latest = _latest()
    try:
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            assert "forge_sessionlease_pkey" in _keys(cursor)
            assert _keys(cursor)["forge_sessions_session_pkey"] == "PRIMARY KEY (id)"
            _old_rows(cursor, tenant=acme, user=acme_user, tag="a")
            _old_rows(cursor, tenant=globex, user=globex_user, tag="g")
            before = _snapshot(cursor)
        _migrate(latest)
    finally:
        _migrate(latest)
    with connection.cursor() as cursor:
        assert _snapshot(cursor) == before
        assert all(before[table] for table in TABLES)
        cursor.execute("SELECT session_id, tenant_id FROM forge_sessionlease ORDER BY 1")
        assert cursor.fetchall() == [("ses_a", acme), ("ses_g", globex)]
        keys = _keys(cursor)
        assert citus.problems(cursor) == []
    assert keys["forge_sessions_session_pkey"] == "PRIMARY KEY (id, tenant_id)"
    assert keys["forge_sessions_copiedmessage_pkey"] == "PRIMARY KEY (id, tenant_id)"
    assert keys["forge_sessions_copiedmessage_session_id_tenant_fk"] == (
        "FOREIGN KEY (session_id, tenant_id) REFERENCES forge_sessions_session(id, tenant_id) "
        "DEFERRABLE INITIALLY DEFERRED"
    )
    assert keys["forge_sessionlease_pkey"] == "PRIMARY KEY (session_id, tenant_id)"
    assert keys["forge_sessions_session_parent_id_tenant_fk"] == (
        "FOREIGN KEY (parent_id, tenant_id) REFERENCES forge_sessions_session(id, tenant_id) "
        "DEFERRABLE INITIALLY DEFERRED"
    )
    assert keys["forge_sessions_part_message_id_tenant_fk"] == (
        "FOREIGN KEY (message_id, tenant_id) REFERENCES forge_sessions_message(id, tenant_id) "
        "DEFERRABLE INITIALLY DEFERRED"
    )
    assert keys["sessionevent_session_seq"] == "UNIQUE (session_id, seq, tenant_id)"
    assert keys["memoryvectors_slice_model"] == "UNIQUE (slice_id, model, tenant_id)"
    assert keys["memoryslice_tenant_search_rowid"] == "UNIQUE (search_rowid, tenant_id)"
    # Relations read through the ORM as before: a projection row's data is its event's,
    # a child session names its parent, a slice its unit and core.
    from memory.models import MemorySlice
    from sessions.models import Message, Part, Session

    assert Part.objects.get(pk="prt_ses_a_1").data["text"] == "hi"
    assert Message.objects.get(pk="msg_ses_g_2").data["role"] == "assistant"
    assert Session.objects.get(pk="ses_a_child").parent_id == "ses_a"
    assert MemorySlice.objects.select_related("unit__core").get(pk="slc_g").unit.core_id == (
        "core_g"
    )
    history = list(
        selectors.iter_history(tenant=Session.objects.get(pk="ses_a").tenant, session_id="ses_a")
    )
    assert [m["info"]["id"] for m in history] == ["msg_ses_a_1", "msg_ses_a_2"]
    assert [p["id"] for p in history[1]["parts"]] == ["prt_ses_a_1"]


def test_a_row_whose_tenant_differs_from_its_parents_stops_the_migration():
    acme, acme_user = _tenant_user("acme")
    globex, _ = _tenant_user("globex")
    latest = _latest()
    try:
        _migrate(BEFORE)
        with connection.cursor() as cursor:
            _old_rows(cursor, tenant=acme, user=acme_user, tag="a")
            cursor.execute(
                "UPDATE forge_sessions_part SET tenant_id = %s WHERE id = 'prt_ses_a_1'",
                [globex],
            )
        from django.db import IntegrityError

        with pytest.raises(IntegrityError, match="forge_sessions_part_session_id_tenant_fk"):
            _migrate(latest)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE forge_sessions_part SET tenant_id = %s WHERE id = 'prt_ses_a_1'",
                [acme],
            )
    finally:
        _migrate(latest)
    with connection.cursor() as cursor:
        assert citus.problems(cursor) == []


def _tenant_user(name: str) -> tuple[int, int]:
    created = create_user(username=f"{name}-user", tenant_name=name)
    return created.tenant.pk, created.user.pk
