"""PostgreSQL: drop the ``*_like`` (``varchar_pattern_ops``) indexes Django adds beside
the primary keys of the log and its projections.

Django creates one for every indexed ``CharField`` so that ``LIKE 'x%'`` can use an
index; Forge never runs a prefix match on an event, message or part id (lookups
are by equality or range, which the primary key's own index serves), so each was
a second full copy of every id. SQLite has no such indexes: nothing to do there.
(A later ``AlterField`` of these ids is still safe: Django drops its ``_like``
index with ``DROP INDEX IF EXISTS``.)
"""

from django.db import migrations

TABLES = ("forge_sessions_sessionevent", "forge_sessions_message", "forge_sessions_part")


def _like_indexes(cursor) -> list[tuple[str, str]]:
    cursor.execute(
        "SELECT indexname, tablename FROM pg_indexes WHERE schemaname = current_schema() "
        "AND tablename = ANY(%s) AND indexname LIKE %s",
        [list(TABLES), r"%\_like"],
    )
    return cursor.fetchall()


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for name, _table in _like_indexes(cursor):
            schema_editor.execute(f'DROP INDEX "{name}"', params=None)


def restore(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS "{table}_id_like" ON "{table}" (id varchar_pattern_ops)',
            params=None,
        )


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0006_lean_projections")]

    operations = [migrations.RunPython(drop, restore)]
