"""The lease carries its session's tenant, like every other tenant-owned row, so that
under Citus it is distributed by ``tenant_id`` with its session (docs/deploy.md).

Existing leases (turns running during the upgrade) take their session's tenant: the
column is added empty, filled from the session, then made NOT NULL."""

import django.db.models.deletion
from django.db import migrations, models

FILL = (
    "UPDATE forge_sessionlease SET tenant_id = ("
    "SELECT s.tenant_id FROM forge_sessions_session s "
    "WHERE s.id = forge_sessionlease.session_id)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_mask_token_log_entries"),
        ("forge", "0006_usage_budgets"),
        ("forge_sessions", "0011_context_snapshot"),
    ]

    operations = [
        migrations.AddField(
            model_name="sessionlease",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="accounts.tenant",
            ),
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop, elidable=False),
        migrations.AlterField(
            model_name="sessionlease",
            name="tenant",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="accounts.tenant",
            ),
        ),
    ]
