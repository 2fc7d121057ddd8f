"""The history digest (``memory.digest``): a core's ``history_digest`` and
``history_digest_at``, and a slice's ``digested``.

The core's two columns are nullable, so both engines add them in place. A slice's
``digested`` is ``NOT NULL DEFAULT false`` in the database (``db_default``), so that
the rolling's own INSERT (``memory.sql``) need not name it; Django's SQLite schema
editor would remake ``memory_memoryslice`` to add such a column, and lose the
full-text index's triggers with it, so the column is added with ``ALTER TABLE``
on both engines and only Django's state is told of the field.
"""

from typing import Any

from django.db import migrations, models

SLICE = "memory_memoryslice"


def add_digested(apps: Any, schema_editor: Any) -> None:
    false = "false" if schema_editor.connection.vendor == "postgresql" else "0"
    schema_editor.execute(
        f"ALTER TABLE {SLICE} ADD COLUMN digested boolean DEFAULT {false} NOT NULL", params=None
    )


def drop_digested(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute(f"ALTER TABLE {SLICE} DROP COLUMN digested", params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0008_citus_unique_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="memorycore",
            name="history_digest",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memorycore",
            name="history_digest_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="memoryslice",
                    name="digested",
                    field=models.BooleanField(db_default=False, default=False),
                ),
            ],
            database_operations=[
                migrations.RunPython(add_digested, drop_digested, elidable=False),
            ],
        ),
    ]
