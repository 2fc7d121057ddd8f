"""Event hashes as their 32 raw bytes instead of 64 hex characters.

The chain is unchanged: it is computed over hex (``sessions.log``), and
``HexDigestField`` reads and writes hex in Python. Existing rows are converted:

* PostgreSQL: the column becomes ``bytea`` (``decode(hash, 'hex')``), a table
  rewrite that fires no row trigger.
* SQLite: the column keeps its declared type (a TEXT-affinity column stores a
  BLOB as is); each value is replaced by its bytes, with the append-only
  trigger that refuses updates lifted for this one statement, in this
  migration's transaction, and put back.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

import sessions.models

EVENT = "forge_sessions_sessionevent"
NO_UPDATE = "forge_sessionevent_no_update"


def _no_update_trigger() -> str:
    triggers = import_module("sessions.migrations.0002_append_only_triggers")
    (statement,) = [s for s in triggers.SQLITE_FORWARD if NO_UPDATE in s]
    return statement


def _sqlite_convert(schema_editor, convert) -> None:
    connection = schema_editor.connection
    connection.ensure_connection()
    connection.connection.create_function("forge_convert_hash", 1, convert, deterministic=True)
    schema_editor.execute(f"DROP TRIGGER {NO_UPDATE}", params=None)
    schema_editor.execute(f"UPDATE {EVENT} SET hash = forge_convert_hash(hash)", params=None)
    schema_editor.execute(_no_update_trigger(), params=None)


def _to_bytes(value):
    return bytes.fromhex(value) if isinstance(value, str) else value


def _to_hex(value):
    return bytes(value).hex() if isinstance(value, bytes | memoryview) else value


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {EVENT} ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex')",
            params=None,
        )
    else:
        _sqlite_convert(schema_editor, _to_bytes)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {EVENT} ALTER COLUMN hash TYPE varchar(64) USING encode(hash, 'hex')",
            params=None,
        )
    else:
        _sqlite_convert(schema_editor, _to_hex)


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0007_drop_like_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forwards, backwards)],
            state_operations=[
                migrations.AlterField(
                    model_name="sessionevent",
                    name="hash",
                    field=sessions.models.HexDigestField(max_length=32),
                )
            ],
        )
    ]
