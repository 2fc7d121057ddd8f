"""A unit message's ``tenant`` and ``unit`` foreign keys are no longer checked by the
database (``db_constraint=False``): the rolling's hot rows.

Django makes its foreign keys ``DEFERRABLE INITIALLY DEFERRED``, so each row a
rolling inserts into ``memory_memorymessage`` (~16 at a window of 20, keep 4)
queued two checks that ran in its ``COMMIT``: ~1.9 ms of a PostgreSQL rolling's
~3.6 ms commit (docs/memory.md). Why each is safe without the database's check
is said on ``MemoryMessage``; the foreign keys that stay checked on this path are
the unit's (tenant, core) and the slice's (tenant, unit), and row-level security
(0003) is unchanged. On SQLite the table is rebuilt (it has no trigger of its own;
its indexes are re-created by Django); on PostgreSQL only the constraints go.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_search_postings"),
    ]

    operations = [
        migrations.AlterField(
            model_name="memorymessage",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="accounts.tenant",
            ),
        ),
        migrations.AlterField(
            model_name="memorymessage",
            name="unit",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="messages",
                to="memory.memoryunit",
            ),
        ),
    ]
