"""Keys for Citus: every distributed table's primary key, and every foreign key between
two distributed tables, hold ``tenant_id`` (docs/deploy.md, "Citus"; the table lists
and the catalog check are ``forge.db.citus``).

PostgreSQL only, and in the database only. Django's state is unchanged: each model's
primary key is still ``id`` (``session`` for the lease and the context snapshot), since
Django 5.2 cannot point a ``ForeignKey`` at a model whose primary key is composite.
What changes, in this order:

1. the single-column foreign keys between distributed tables are dropped;
2. each distributed table's primary key ``(id)`` becomes ``(id, tenant_id)`` (same
   name, ``<table>_pkey``). No unique index on ``id`` alone is kept: Citus refuses a
   unique index without the distribution column on a distributed table. Ids are
   random (or from a sequence), and every write path already names the row's tenant;
3. the foreign keys come back as ``(column, tenant_id) REFERENCES target (id,
   tenant_id)``, ``DEFERRABLE INITIALLY DEFERRED`` as Django makes its own (deletes
   still cascade in Python, by Django). Adding them checks every existing row: a row
   whose tenant differs from its parent's stops the migration.

The rows stay where they are (no data is rewritten, only indexes); the tables are
locked while their keys are rebuilt. SQLite is left as it is.

It lives in ``forge``, not in the stores, because the lease (``forge``) points at a
session: the session's key can change only after ``forge`` created that foreign key.
A later migration that adds a foreign key to a distributed table must add it the same
way (composite, by SQL): Django's own would reference ``(id)``, which is no longer
unique in PostgreSQL.
"""

from django.db import migrations

from accounts.pgonly import postgresql_only

SESSION = "forge_sessions_session"
MESSAGE = "forge_sessions_message"
CORE = "memory_memorycore"
UNIT = "memory_memoryunit"
SLICE = "memory_memoryslice"

# (table, the column Django's primary key is)
PRIMARY_KEYS = [
    (SESSION, "id"),
    ("forge_sessions_sessionevent", "id"),
    (MESSAGE, "id"),
    ("forge_sessions_part", "id"),
    ("forge_sessions_contextsnapshot", "session_id"),
    (CORE, "id"),
    ("memory_dialoguemessage", "id"),
    (UNIT, "id"),
    ("memory_memorymessage", "id"),
    (SLICE, "id"),
    ("memory_memoryvectors", "id"),
    ("forge_sessionlease", "session_id"),
    ("forge_usage", "id"),
    ("forge_budget", "id"),
]

# (table, column, target): a foreign key to the target's primary key.
FOREIGN_KEYS = [
    (SESSION, "parent_id", SESSION),
    ("forge_sessions_sessionevent", "session_id", SESSION),
    (MESSAGE, "session_id", SESSION),
    ("forge_sessions_part", "session_id", SESSION),
    ("forge_sessions_part", "message_id", MESSAGE),
    ("forge_sessions_contextsnapshot", "session_id", SESSION),
    ("forge_sessionlease", "session_id", SESSION),
    ("memory_dialoguemessage", "core_id", CORE),
    (UNIT, "core_id", CORE),
    (SLICE, "unit_id", UNIT),
    ("memory_memoryvectors", "core_id", CORE),
    ("memory_memoryvectors", "slice_id", SLICE),
]


def _drop_where(table: str, condition: str) -> str:
    """Drop every constraint of ``table`` that ``condition`` (on ``pg_constraint c``)
    selects, whatever it is named (Django names foreign keys by a hash)."""
    return f"""
DO $$
DECLARE name text;
BEGIN
    FOR name IN SELECT c.conname FROM pg_constraint c
        WHERE c.conrelid = '{table}'::regclass AND {condition}
    LOOP
        EXECUTE format('ALTER TABLE {table} DROP CONSTRAINT %I', name);
    END LOOP;
END
$$
"""  # noqa: S608 (names from this module only)


def _drop_single_fk(table: str, column: str, target: str) -> str:
    attnum = f"(SELECT attnum FROM pg_attribute WHERE attrelid = '{table}'::regclass AND "  # noqa: S608
    attnum += f"attname = '{column}')"
    condition = f"c.contype = 'f' AND c.confrelid = '{target}'::regclass AND "
    return _drop_where(table, condition + f"c.conkey = ARRAY[{attnum}]")


def _fk(table: str, column: str, target: str, *, tenant: bool) -> str:
    key = "id"  # every target's primary key column
    if tenant:
        return (
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_{column}_tenant_fk "
            f"FOREIGN KEY ({column}, tenant_id) REFERENCES {target} ({key}, tenant_id) "
            "DEFERRABLE INITIALLY DEFERRED"
        )
    return (
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_{column}_fk "
        f"FOREIGN KEY ({column}) REFERENCES {target} ({key}) DEFERRABLE INITIALLY DEFERRED"
    )


def _pk(table: str, column: str, *, tenant: bool) -> list[str]:
    columns = f"{column}, tenant_id" if tenant else column
    return [
        _drop_where(table, "c.contype = 'p'"),
        f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY ({columns})",
    ]


FORWARD = [
    *(_drop_single_fk(t, c, target) for t, c, target in FOREIGN_KEYS),
    *(s for t, c in PRIMARY_KEYS for s in _pk(t, c, tenant=True)),
    *(_fk(t, c, target, tenant=True) for t, c, target in FOREIGN_KEYS),
]
BACKWARD = [
    *(f"ALTER TABLE {t} DROP CONSTRAINT {t}_{c}_tenant_fk" for t, c, _ in FOREIGN_KEYS),
    *(s for t, c in PRIMARY_KEYS for s in _pk(t, c, tenant=False)),
    *(_fk(t, c, target, tenant=False) for t, c, target in FOREIGN_KEYS),
]


class Migration(migrations.Migration):
    dependencies = [
        ("forge", "0007_sessionlease_tenant"),
        ("forge_sessions", "0012_citus_unique_keys"),
        ("memory", "0008_citus_unique_keys"),
    ]

    operations = [postgresql_only(FORWARD, BACKWARD)]
