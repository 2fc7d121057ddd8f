"""Citus: how Forge's tables would be spread over a cluster, and a check that the schema
still allows it.

Citus cannot be installed here, so the schema is kept ready for it instead:

* every **distributed** table (a tenant's data) is distributed by ``tenant_id``, all in
  one colocation group with ``forge_sessions_session``: a tenant's rows of every table
  live on the same shard, so a query that names one tenant runs on one node, joins
  included. Its primary key and every unique index hold ``tenant_id`` (Citus refuses a
  unique index without the distribution column), and a foreign key between two of
  them pairs ``tenant_id`` with ``tenant_id``;
* a **reference** table is small, read everywhere and written rarely: a copy on every
  node. It may be the target of a distributed table's foreign key, never the other way
  round;
* a **local** table stays on the coordinator and has no foreign key to or from the
  others.

Django's own model-level primary key stays ``id`` (Django 5.2 cannot point a
``ForeignKey`` at a composite primary key); the database's keys are changed by
PostgreSQL-only migrations (``forge/migrations/0008_citus_keys.py`` and the stores'
``*_citus_unique_keys``). :data:`DISTRIBUTION_CALLS` are the statements to run on a
Citus coordinator after ``migrate`` (docs/deploy.md, "Citus"); :func:`problems` reads
PostgreSQL's catalog and says where a table breaks these rules
(``tests/db/test_citus_ready.py`` runs it on the migrated test database).

Why these choices:

* ``accounts_tenant`` is a **reference** table, not distributed by its own ``id``:
  every tenant-owned row has a foreign key to it, which Citus allows from a
  distributed table only to a reference table or to a table of the same colocation
  group by the distribution column; it is tiny and read on every request.
* ``accounts_membership`` is a **reference** table although it names a tenant: it is
  how a request finds *which* tenant its user acts in (``accounts.services``), by
  user, before the tenant is known. Distributed by ``tenant_id``, that lookup would go
  to every shard on every request; memberships are few and rarely written.
* users, Django's auth, content types, admin log, sessions, API tokens and the
  agents' configuration are shared by all tenants: reference tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DISTRIBUTION_COLUMN = "tenant_id"

# Distributed by tenant_id, in the order they must be distributed (a foreign key's
# target before its source); the first is the colocation group's anchor.
DISTRIBUTED: tuple[str, ...] = (
    "forge_sessions_session",
    "forge_sessions_sessionevent",
    "forge_sessions_message",
    "forge_sessions_part",
    "forge_sessions_contextsnapshot",
    "forge_sessions_copiedmessage",
    "forge_sessionlease",
    "memory_memorycore",
    "memory_dialoguemessage",
    "memory_memoryunit",
    "memory_memorymessage",
    "memory_memoryslice",
    "memory_memoryvectors",
    "forge_usage",
    "forge_retiredusage",
    "forge_sideusage",
    "forge_budget",
)
COLOCATE_WITH = DISTRIBUTED[0]

# A copy on every node, in the order they must be created (a foreign key's target
# before its source).
REFERENCE: tuple[str, ...] = (
    "django_content_type",
    "auth_permission",
    "auth_group",
    "auth_group_permissions",
    "accounts_user",
    "accounts_user_groups",
    "accounts_user_user_permissions",
    "accounts_tenant",
    "accounts_membership",
    "authtoken_token",
    "django_admin_log",
    "django_session",
    "forge_agent",
)

# On the coordinator only.
LOCAL: tuple[str, ...] = ("django_migrations",)


def distribution_calls(
    distributed: Iterable[str] = DISTRIBUTED, reference: Iterable[str] = REFERENCE
) -> list[str]:
    """The statements that distribute the schema on a Citus coordinator, in order:
    reference tables first (distributed tables' foreign keys point at them), then the
    distributed tables, each colocated with the first."""
    calls = [f"SELECT create_reference_table('{table}');" for table in reference]
    tables = list(distributed)
    for table in tables:
        colocate = "'none'" if table == tables[0] else f"'{tables[0]}'"
        calls.append(
            f"SELECT create_distributed_table('{table}', '{DISTRIBUTION_COLUMN}', "
            f"colocate_with => {colocate});"
        )
    return calls


DISTRIBUTION_CALLS: tuple[str, ...] = tuple(distribution_calls())


@dataclass(frozen=True)
class _ForeignKey:
    name: str
    table: str
    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]


def problems(
    cursor: Any,
    *,
    schema: str = "public",
    distributed: Iterable[str] = DISTRIBUTED,
    reference: Iterable[str] = REFERENCE,
    local: Iterable[str] = LOCAL,
) -> list[str]:
    """What keeps the tables of ``schema`` (PostgreSQL's catalog, read through
    ``cursor``) from being distributed as the three lists say; empty when nothing does.

    Every table must be in exactly one list, and every listed table must exist. A
    distributed table must have a NOT NULL ``tenant_id``, a primary key, and every
    unique index (primary key included) must hold ``tenant_id``; its foreign keys may
    point at a distributed table, pairing ``tenant_id`` with ``tenant_id``, or at a
    reference table. A reference table's foreign keys may point at reference tables
    only; a local table has no foreign key to or from a distributed or reference table.
    """
    kinds: dict[str, str] = {}
    found: list[str] = []
    for kind, names in (("distributed", distributed), ("reference", reference), ("local", local)):
        for name in names:
            if name in kinds:
                found.append(f"{name}: listed as both {kinds[name]} and {kind}")
            kinds[name] = kind
    tables = _tables(cursor, schema)
    for table in sorted(set(kinds) - tables):
        found.append(f"{table}: listed as {kinds[table]} but not in the database")
    for table in sorted(tables - set(kinds)):
        found.append(f"{table}: not classified (distributed, reference or local: forge.db.citus)")
    column = _tenant_columns(cursor, schema)
    keys = _unique_indexes(cursor, schema)
    for table in sorted(t for t in tables if kinds.get(t) == "distributed"):
        if table not in column:
            found.append(f"{table}: distributed but has no {DISTRIBUTION_COLUMN} column")
        elif not column[table]:
            found.append(f"{table}: {DISTRIBUTION_COLUMN} may be NULL")
        if not any(primary for primary, _, _ in keys.get(table, [])):
            found.append(f"{table}: distributed but has no primary key")
        for primary, index, columns in keys.get(table, []):
            if DISTRIBUTION_COLUMN not in columns:
                what = "primary key" if primary else "unique index"
                found.append(
                    f"{table}: {what} {index} ({', '.join(columns) or 'an expression'}) "
                    f"does not hold {DISTRIBUTION_COLUMN}"
                )
    for fk in _foreign_keys(cursor, schema):
        source, target = kinds.get(fk.table), kinds.get(fk.target)
        where = f"{fk.table}: foreign key {fk.name} to {fk.target}"
        if source == "distributed" and target == "distributed":
            pairs = dict(zip(fk.columns, fk.target_columns, strict=True))
            if pairs.get(DISTRIBUTION_COLUMN) != DISTRIBUTION_COLUMN:
                found.append(
                    f"{where} ({', '.join(fk.columns)}) does not pair "
                    f"{DISTRIBUTION_COLUMN} with {DISTRIBUTION_COLUMN}"
                )
        elif source == "distributed" and target != "reference":
            found.append(
                f"{where}: a distributed table may point only at distributed or "
                f"reference tables, not a {target or 'unclassified'} one"
            )
        elif source == "reference" and target != "reference":
            found.append(
                f"{where}: a reference table may point only at reference tables, "
                f"not a {target or 'unclassified'} one"
            )
        elif source == "local" and target in ("distributed", "reference"):
            found.append(f"{where}: a local table may not point at a {target} table")
    return found


def _tables(cursor: Any, schema: str) -> set[str]:
    cursor.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        [schema],
    )
    return {name for (name,) in cursor.fetchall()}


def _tenant_columns(cursor: Any, schema: str) -> dict[str, bool]:
    """Tables that have a ``tenant_id`` column, and whether it is NOT NULL."""
    cursor.execute(
        "SELECT c.relname, a.attnotnull FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND a.attname = %s AND NOT a.attisdropped",
        [schema, DISTRIBUTION_COLUMN],
    )
    return dict(cursor.fetchall())


def _unique_indexes(cursor: Any, schema: str) -> dict[str, list[tuple[bool, str, list[str]]]]:
    """Per table: each unique index (a primary key's and unique constraints' too) as
    (is the primary key, its name, its key columns in order; an expression is left out)."""
    cursor.execute(
        "SELECT c.relname, i.indisprimary, x.relname, "
        "ARRAY(SELECT a.attname FROM unnest(i.indkey[0:i.indnkeyatts - 1]) WITH ORDINALITY "
        "AS k(attnum, n) JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = k.attnum ORDER BY k.n) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_class x ON x.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND i.indisunique ORDER BY c.relname, x.relname",
        [schema],
    )
    found: dict[str, list[tuple[bool, str, list[str]]]] = {}
    for table, primary, index, columns in cursor.fetchall():
        found.setdefault(table, []).append((primary, index, list(columns)))
    return found


def _foreign_keys(cursor: Any, schema: str) -> list[_ForeignKey]:
    cursor.execute(
        "SELECT k.conname, s.relname, t.relname, "
        "ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY AS c(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = c.attnum ORDER BY c.n), "
        "ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY AS c(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = c.attnum ORDER BY c.n) "
        "FROM pg_constraint k JOIN pg_class s ON s.oid = k.conrelid "
        "JOIN pg_class t ON t.oid = k.confrelid JOIN pg_namespace n ON n.oid = s.relnamespace "
        "WHERE k.contype = 'f' AND n.nspname = %s ORDER BY s.relname, k.conname",
        [schema],
    )
    return [
        _ForeignKey(name, table, tuple(columns), target, tuple(target_columns))
        for name, table, target, columns, target_columns in cursor.fetchall()
    ]
