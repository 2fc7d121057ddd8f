"""Hybrid memory search (issue 18): full text of summaries AND raw messages, with the
tokens of ``memory.text``, and dense vectors per slice and message.

SQLite: the FTS5 table ``memory_slice_fts`` (summaries, FTS5's own tokenizer) gives
way to ``memory_search_fts(body, scope)``, whose ``body`` holds the tokens
``memory.text`` made (a line for the summary, then one per message). FTS5's
``ascii`` tokenizer only splits them on the spaces (every non-ASCII character is
part of a token, so a letter FTS5's own Unicode tables do not know never cuts a
token in two); ``detail=column`` (no positions: no phrase is ever searched). A trigger drops a slice's row when the slice is deleted.

PostgreSQL: ``search_document`` (tsvector, GIN) is kept and now holds the same
tokens (``array_to_tsvector``); ``search_text`` holds the token lines.

Every slice is marked not indexed: the next ``roll_dialogs`` sweep (or
``manage.py reindex_memory``) indexes them again. Vectors are ``reindex_memory``'s
job. ``memory_memoryvectors`` is tenant-owned (row-level security).

``memory_slice_searched`` (both engines, outside the ORM) covers BM25's statistics:
a search counts the searched units' indexed slices and sums their lengths from
the index alone.

Note for later migrations (as 0002 said): Django alters a SQLite table by rebuilding
it, which drops its triggers and the indexes it does not know; one that alters
``memory_memoryslice`` must re-create ``memory_search_fts_delete`` and
``memory_slice_searched``.
"""

import accounts.times
import django.db.models.deletion
from django.db import migrations, models

from accounts.rowsecurity import tenant_owned

SLICE = "memory_memoryslice"
OLD_FTS = "memory_slice_fts"
FTS = "memory_search_fts"

SQLITE_FORWARD = [
    "DROP TRIGGER IF EXISTS memory_slice_fts_delete",
    f"DROP TABLE IF EXISTS {OLD_FTS}",
    f"""
    CREATE VIRTUAL TABLE {FTS} USING fts5(
        body, scope, tokenize = 'ascii', detail = column
    )
    """,
    f"""
    CREATE TRIGGER memory_search_fts_delete AFTER DELETE ON {SLICE}
    WHEN OLD.search_rowid IS NOT NULL
    BEGIN
        DELETE FROM {FTS} WHERE rowid = OLD.search_rowid;
    END
    """,
    f"UPDATE {SLICE} SET indexed = 0, search_rowid = NULL, search_length = NULL",
    # BM25's N and average length over a core's units, from the index alone.
    f"CREATE INDEX memory_slice_searched ON {SLICE} (unit_id, tenant_id, search_length) "
    "WHERE indexed",
]
SQLITE_BACKWARD = [
    "DROP INDEX IF EXISTS memory_slice_searched",
    "DROP TRIGGER IF EXISTS memory_search_fts_delete",
    f"DROP TABLE IF EXISTS {FTS}",
    f"""
    CREATE VIRTUAL TABLE {OLD_FTS} USING fts5(
        summary, scope, tokenize = 'porter unicode61 remove_diacritics 2'
    )
    """,
    f"""
    CREATE TRIGGER memory_slice_fts_delete AFTER DELETE ON {SLICE}
    WHEN OLD.search_rowid IS NOT NULL
    BEGIN
        DELETE FROM {OLD_FTS} WHERE rowid = OLD.search_rowid;
    END
    """,
    f"UPDATE {SLICE} SET indexed = 0, search_rowid = NULL",
]
POSTGRES_FORWARD = [
    f"ALTER TABLE {SLICE} ADD COLUMN search_text text",
    f"UPDATE {SLICE} SET indexed = false, search_document = NULL, search_length = NULL",
    f"CREATE INDEX memory_slice_searched ON {SLICE} (unit_id, tenant_id) "
    "INCLUDE (search_length) WHERE indexed",
]
POSTGRES_BACKWARD = [
    "DROP INDEX IF EXISTS memory_slice_searched",
    f"ALTER TABLE {SLICE} DROP COLUMN IF EXISTS search_text",
    f"UPDATE {SLICE} SET indexed = false, search_document = NULL",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_mask_token_log_entries'),
        ('memory', '0004_message_session'),
    ]

    operations = [
        migrations.AddField(
            model_name='memoryslice',
            name='search_length',
            field=models.PositiveIntegerField(blank=True, editable=False, null=True),
        ),
        migrations.CreateModel(
            name='MemoryVectors',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('model', models.CharField(max_length=200)),
                ('dim', models.PositiveIntegerField()),
                ('rows', models.PositiveIntegerField()),
                ('start_index', models.PositiveIntegerField()),
                ('data', models.BinaryField()),
                ('created_at', models.DateTimeField(default=accounts.times.now_ms)),
                ('core', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.memorycore')),
                ('slice', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='vectors', to='memory.memoryslice')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.tenant')),
            ],
            options={
                'verbose_name': 'memory vectors',
                'verbose_name_plural': 'memory vectors',
                'indexes': [models.Index(fields=['core', 'model', 'id'], name='memoryvectors_core_model')],
                'constraints': [models.UniqueConstraint(fields=('slice', 'model'), name='memoryvectors_slice_model')],
            },
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
        tenant_owned("memory_memoryvectors"),
    ]
