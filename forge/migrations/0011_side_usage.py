"""``SideUsage``: model calls no session log records (a session's title), so that
``rebuild_usage`` gives them back. Tenant-owned (row-level security), and keyed for
Citus as every distributed table (``0008_citus_keys``), like ``0009_retired_usage``."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from accounts.pgonly import postgresql_only
from accounts.rowsecurity import tenant_owned

TABLE = "forge_sideusage"
PRIMARY_KEY = [
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, tenant_id)",
]
BACK = [
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id)",
]


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_mask_token_log_entries'),
        ('forge', '0010_lease_reservations'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='SideUsage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('agent', models.CharField(blank=True, max_length=64)),
                ('model', models.CharField(blank=True, help_text='provider/model', max_length=200)),
                ('day', models.DateField()),
                ('turns', models.PositiveBigIntegerField(default=0)),
                ('steps', models.PositiveBigIntegerField(default=0)),
                ('input_tokens', models.PositiveBigIntegerField(default=0)),
                ('output_tokens', models.PositiveBigIntegerField(default=0)),
                ('reasoning_tokens', models.PositiveBigIntegerField(default=0)),
                ('cache_read_tokens', models.PositiveBigIntegerField(default=0)),
                ('cache_write_tokens', models.PositiveBigIntegerField(default=0)),
                ('cost_nanos', models.PositiveBigIntegerField(default=0)),
                ('failed', models.PositiveBigIntegerField(default=0, help_text='replies ended by an error')),
                ('aborted', models.PositiveBigIntegerField(default=0, help_text='replies aborted')),
                ('tool_calls', models.PositiveBigIntegerField(default=0)),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, to='accounts.tenant')),
                ('user', models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'side usage',
                'constraints': [models.UniqueConstraint(fields=('tenant', 'user', 'agent', 'model', 'day'), name='sideusage_key')],
            },
        ),
        tenant_owned(TABLE),
        postgresql_only(PRIMARY_KEY, BACK),
    ]
