"""Every unique key of the memory tables holds the tenant, so that they can be
distributed by ``tenant_id`` under Citus (a distributed table's unique constraints
must hold its distribution column; ``forge.db.citus``). The tenant goes last: the
leading columns still serve the reads they served (a window by ``(core, seq)``, a
unit's messages by ``(unit, index)`` …), and the constraints keep their names.
``search_rowid`` (from the global sequence ``memory_search_seq`` on PostgreSQL) is
unique with the tenant instead of alone.

PostgreSQL only, in the database: each constraint is dropped and added again with the
tenant. SQLite keeps the narrower (stricter) ones and is not remade (that would drop
the full-text index's triggers): only Django's state changes there.
"""

from django.db import migrations, models

from accounts.pgonly import postgresql_only

SLICE = "memory_memoryslice"
KEYS = [
    # (table, constraint, its columns before the tenant)
    ("memory_dialoguemessage", "dialoguemessage_core_seq", "core_id, seq"),
    ("memory_memorymessage", "memorymessage_unit_index", "unit_id, index"),
    ("memory_memoryunit", "memoryunit_core_session", "core_id, memory_session_id"),
    ("memory_memoryvectors", "memoryvectors_slice_model", "slice_id, model"),
]
# The column's own UNIQUE, whatever PostgreSQL named it when Django added it.
DROP_ROWID_UNIQUE = f"""
DO $$
DECLARE name text;
BEGIN
    SELECT c.conname INTO name FROM pg_constraint c
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attname = 'search_rowid'
    WHERE c.conrelid = '{SLICE}'::regclass AND c.contype = 'u' AND c.conkey = ARRAY[a.attnum];
    IF name IS NOT NULL THEN
        EXECUTE format('ALTER TABLE {SLICE} DROP CONSTRAINT %I', name);
    END IF;
END
$$
"""  # noqa: S608 (a table name only)
FORWARD = [
    *(
        statement
        for table, name, columns in KEYS
        for statement in (
            f"ALTER TABLE {table} DROP CONSTRAINT {name}",
            f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({columns}, tenant_id)",
        )
    ),
    DROP_ROWID_UNIQUE,
    f"ALTER TABLE {SLICE} ADD CONSTRAINT memoryslice_tenant_search_rowid "
    "UNIQUE (search_rowid, tenant_id)",
]
BACKWARD = [
    *(
        statement
        for table, name, columns in KEYS
        for statement in (
            f"ALTER TABLE {table} DROP CONSTRAINT {name}",
            f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({columns})",
        )
    ),
    f"ALTER TABLE {SLICE} DROP CONSTRAINT memoryslice_tenant_search_rowid",
    f"ALTER TABLE {SLICE} ADD CONSTRAINT memory_memoryslice_search_rowid_key UNIQUE (search_rowid)",
]


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_mask_token_log_entries"),
        ("memory", "0007_rolling_message_constraints"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[postgresql_only(FORWARD, BACKWARD)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="dialoguemessage",
                    name="dialoguemessage_core_seq",
                ),
                migrations.RemoveConstraint(
                    model_name="memorymessage",
                    name="memorymessage_unit_index",
                ),
                migrations.RemoveConstraint(
                    model_name="memoryunit",
                    name="memoryunit_core_session",
                ),
                migrations.RemoveConstraint(
                    model_name="memoryvectors",
                    name="memoryvectors_slice_model",
                ),
                migrations.AlterField(
                    model_name="memoryslice",
                    name="search_rowid",
                    field=models.BigIntegerField(blank=True, editable=False, null=True),
                ),
                migrations.AddConstraint(
                    model_name="dialoguemessage",
                    constraint=models.UniqueConstraint(
                        fields=("core", "seq", "tenant"), name="dialoguemessage_core_seq"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memorymessage",
                    constraint=models.UniqueConstraint(
                        fields=("unit", "index", "tenant"), name="memorymessage_unit_index"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memoryslice",
                    constraint=models.UniqueConstraint(
                        fields=("search_rowid", "tenant"), name="memoryslice_tenant_search_rowid"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memoryunit",
                    constraint=models.UniqueConstraint(
                        fields=("core", "memory_session_id", "tenant"),
                        name="memoryunit_core_session",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="memoryvectors",
                    constraint=models.UniqueConstraint(
                        fields=("slice", "model", "tenant"), name="memoryvectors_slice_model"
                    ),
                ),
            ],
        ),
    ]
