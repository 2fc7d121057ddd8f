"""The full-text index of slice summaries, per database.

SQLite: an FTS5 table (porter stemming, diacritics folded) whose rowid is kept
in ``memory_memoryslice.search_rowid``, and a trigger that drops a slice's row
when the slice is deleted (cascades and flushes included).

PostgreSQL: a ``search_document tsvector`` column on the slice table, with a
GIN index (outside the ORM; written by ``memory.search.index_slices``).

Note for later migrations: Django alters a SQLite table by rebuilding it, which
drops its triggers; one that alters ``memory_memoryslice`` must re-create
``memory_slice_fts_delete`` (on PostgreSQL it must keep ``search_document``).
"""

from django.db import migrations

SLICE = "memory_memoryslice"
FTS = "memory_slice_fts"

SQLITE_FORWARD = [
    f"""
    CREATE VIRTUAL TABLE {FTS} USING fts5(
        summary, scope, tokenize = 'porter unicode61 remove_diacritics 2'
    )
    """,
    f"""
    CREATE TRIGGER memory_slice_fts_delete AFTER DELETE ON {SLICE}
    WHEN OLD.search_rowid IS NOT NULL
    BEGIN
        DELETE FROM {FTS} WHERE rowid = OLD.search_rowid;
    END
    """,
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_slice_fts_delete",
    f"DROP TABLE IF EXISTS {FTS}",
]
POSTGRES_FORWARD = [
    f"ALTER TABLE {SLICE} ADD COLUMN search_document tsvector",
    f"CREATE INDEX memory_slice_search ON {SLICE} USING GIN (search_document)",
]
POSTGRES_BACKWARD = [
    "DROP INDEX IF EXISTS memory_slice_search",
    f"ALTER TABLE {SLICE} DROP COLUMN IF EXISTS search_document",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        )
    ]
