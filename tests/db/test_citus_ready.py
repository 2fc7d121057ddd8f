"""The migrated schema can be distributed by Citus (``forge.db.citus``), read from
PostgreSQL's catalog: every table classified, every distributed table's keys holding
``tenant_id``, foreign keys that Citus allows. And the check fails on tables that break
each rule, so it can fail."""

from __future__ import annotations

import pytest
from django.db import connection

from forge.db import citus

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db]

SCRATCH = "citus_scratch"


def test_the_migrated_schema_is_ready_for_citus():
    with connection.cursor() as cursor:
        assert citus.problems(cursor) == []


def test_every_tenant_owned_table_is_distributed_and_its_keys_hold_the_tenant():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' "
            "AND a.attname = 'tenant_id'"
        )
        with_tenant = {name for (name,) in cursor.fetchall()}
        cursor.execute(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'p' AND connamespace = 'public'::regnamespace"
        )
        keys = dict(cursor.fetchall())
    # accounts_membership names a tenant but is a reference table (forge.db.citus says why).
    assert with_tenant - {"accounts_membership"} == set(citus.DISTRIBUTED)
    assert keys["forge_sessions_session"] == "PRIMARY KEY (id, tenant_id)"
    assert keys["forge_sessionlease"] == "PRIMARY KEY (session_id, tenant_id)"
    assert keys["forge_sessions_contextsnapshot"] == "PRIMARY KEY (session_id, tenant_id)"
    assert keys["accounts_tenant"] == "PRIMARY KEY (id)"


def test_the_calls_distribute_each_foreign_keys_target_before_its_source():
    calls = citus.DISTRIBUTION_CALLS
    order = {c.split("'")[1]: i for i, c in enumerate(calls)}
    assert len(order) == len(citus.DISTRIBUTED) + len(citus.REFERENCE)
    assert all("create_reference_table" in c for c in calls[: len(citus.REFERENCE)])
    assert calls[len(citus.REFERENCE)] == (
        "SELECT create_distributed_table('forge_sessions_session', 'tenant_id', "
        "colocate_with => 'none');"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND connamespace = 'public'::regnamespace"
        )
        foreign_keys = [(s, t) for s, t in cursor.fetchall() if s != t]
    assert foreign_keys
    for source, target in foreign_keys:
        if source in order:
            assert order[target] < order[source], (source, target)


def _scratch(*statements: str) -> list[str]:
    """The check's findings on a scratch schema holding these tables."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE SCHEMA {SCRATCH}")
        cursor.execute(f"SET LOCAL search_path TO {SCRATCH}")
        for statement in statements:
            cursor.execute(statement)
        return citus.problems(
            cursor,
            schema=SCRATCH,
            distributed=["parent", "child"],
            reference=["kind"],
            local=[],
        )


GOOD = [
    "CREATE TABLE kind (id int PRIMARY KEY, name text UNIQUE)",
    "CREATE TABLE parent (id text, tenant_id int NOT NULL, kind_id int REFERENCES kind (id), "
    "PRIMARY KEY (id, tenant_id))",
    "CREATE TABLE child (id text, tenant_id int NOT NULL, parent_id text, seq int, "
    "PRIMARY KEY (id, tenant_id), UNIQUE (parent_id, seq, tenant_id), "
    "FOREIGN KEY (parent_id, tenant_id) REFERENCES parent (id, tenant_id))",
]


def test_the_check_passes_tables_that_keep_the_rules():
    assert _scratch(*GOOD) == []


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        (
            "CREATE TABLE stray (id int PRIMARY KEY)",
            "stray: not classified (distributed, reference or local: forge.db.citus)",
        ),
        (
            "ALTER TABLE child DROP CONSTRAINT child_pkey",
            "child: distributed but has no primary key",
        ),
        (
            "ALTER TABLE child DROP CONSTRAINT child_pkey, ADD PRIMARY KEY (id)",
            "child: primary key child_pkey (id) does not hold tenant_id",
        ),
        (
            "CREATE UNIQUE INDEX child_seq ON child (parent_id, seq)",
            "child: unique index child_seq (parent_id, seq) does not hold tenant_id",
        ),
        (
            "ALTER TABLE child ADD COLUMN other int, ADD CONSTRAINT child_other "
            "FOREIGN KEY (parent_id, other) REFERENCES parent (id, tenant_id)",
            "child: foreign key child_other to parent (parent_id, other) does not pair "
            "tenant_id with tenant_id",
        ),
        (
            "ALTER TABLE kind ADD COLUMN parent_id text, ADD COLUMN tenant_id int, "
            "ADD CONSTRAINT kind_parent FOREIGN KEY (parent_id, tenant_id) "
            "REFERENCES parent (id, tenant_id)",
            "kind: foreign key kind_parent to parent: a reference table may point only at "
            "reference tables, not a distributed one",
        ),
    ],
)
def test_the_check_finds_a_table_that_breaks_a_rule(change, finding):
    assert _scratch(*GOOD, change) == [finding]


def test_the_check_finds_a_distributed_table_without_the_tenant():
    found = _scratch(
        "CREATE TABLE kind (id int PRIMARY KEY)",
        "CREATE TABLE parent (id text PRIMARY KEY)",
        "CREATE TABLE child (id text, tenant_id int NOT NULL, PRIMARY KEY (id, tenant_id))",
    )
    assert found == [
        "parent: distributed but has no tenant_id column",
        "parent: primary key parent_pkey (id) does not hold tenant_id",
    ]


def test_the_check_finds_a_distribution_column_that_may_be_null():
    found = _scratch(
        "CREATE TABLE kind (id int PRIMARY KEY)",
        "CREATE TABLE parent (id text, tenant_id int NOT NULL, PRIMARY KEY (id, tenant_id))",
        "CREATE TABLE child (id text, tenant_id int, UNIQUE (id, tenant_id))",
    )
    assert found == [
        "child: tenant_id may be NULL",
        "child: distributed but has no primary key",
    ]


def test_the_check_finds_a_listed_table_that_is_missing():
    assert _scratch(*GOOD[:2]) == ["child: listed as distributed but not in the database"]


def test_an_aggregate_groups_by_every_selected_column_not_the_pk_alone(session):
    """PostgreSQL knows that ``id`` determines the row only from a primary key on ``id``,
    and the database's key is ``(id, tenant_id)``: Django's GROUP BY pk alone would be
    refused ("must appear in the GROUP BY clause"), so the backend turns it off."""
    from django.db.models import Count

    from sessions.models import Session

    assert connection.features.allows_group_by_selected_pks is False
    counted = Session.objects.annotate(messages_count=Count("messages")).get(pk=session.pk)
    assert counted.messages_count == 0
    assert counted.tenant_id == session.tenant_id
