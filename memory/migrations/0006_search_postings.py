"""Search reads each core's full-text postings once per process (``memory.postings``)
and then asks, per query, only whether they changed: ``count(*)``,
``sum(search_length)`` and ``max(search_rowid)`` of the core's indexed slices.

* ``search_rowid`` grows with every full-text document written. SQLite already had
  it (the FTS5 row). PostgreSQL gets the sequence ``memory_search_seq``; indexing
  sets ``search_rowid = nextval(…)`` and every slice indexed already gets one now.
* ``memory_slice_searched`` covers ``search_rowid`` too, so the question is answered
  from the index alone.

Existing data: nothing is re-indexed; the statements are the same on an empty
database. Backwards: the index as 0005 made it (and, on PostgreSQL, no sequence and
``search_rowid`` NULL again, as 0005 left it).
"""

from django.db import migrations

SLICE = "memory_memoryslice"
SEQUENCE = "memory_search_seq"

SQLITE_FORWARD = [
    "DROP INDEX IF EXISTS memory_slice_searched",
    f"CREATE INDEX memory_slice_searched ON {SLICE} "
    "(unit_id, tenant_id, search_length, search_rowid) WHERE indexed",
]
SQLITE_BACKWARD = [
    "DROP INDEX IF EXISTS memory_slice_searched",
    f"CREATE INDEX memory_slice_searched ON {SLICE} (unit_id, tenant_id, search_length) "
    "WHERE indexed",
]
POSTGRES_FORWARD = [
    f"CREATE SEQUENCE IF NOT EXISTS {SEQUENCE}",
    f"UPDATE {SLICE} SET search_rowid = nextval('{SEQUENCE}') WHERE indexed",
    "DROP INDEX IF EXISTS memory_slice_searched",
    f"CREATE INDEX memory_slice_searched ON {SLICE} (unit_id, tenant_id) "
    "INCLUDE (search_length, search_rowid) WHERE indexed",
]
POSTGRES_BACKWARD = [
    "DROP INDEX IF EXISTS memory_slice_searched",
    f"CREATE INDEX memory_slice_searched ON {SLICE} (unit_id, tenant_id) "
    "INCLUDE (search_length) WHERE indexed",
    f"UPDATE {SLICE} SET search_rowid = NULL",
    f"DROP SEQUENCE IF EXISTS {SEQUENCE}",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0005_hybrid_search'),
    ]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
    ]
