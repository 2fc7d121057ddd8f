"""``CopiedMessage``: what each message of a fork or an import's copy was copied from,
so that a rolling of the source's turns after the copy is cut from the copy's model view
too (docs/memory.md, "Forks and copies"). Nothing is backfilled: copies made before it
keep the cut they carried (``rolled_through_moved``, ``on_history_copied``).

Tenant-owned (row-level security), and keyed for Citus as every distributed table
(``forge`` 0008): the primary key is ``(id, tenant_id)``, and the foreign key to the
copy's session is ``(session_id, tenant_id)``, added by SQL (Django's own would
reference ``(id)``, which is no longer unique in PostgreSQL), hence the dependency on
``forge`` 0008. Django deletes the rows with their session (``CASCADE``)."""

import django.db.models.deletion
from django.db import migrations, models

from accounts.pgonly import postgresql_only
from accounts.rowsecurity import tenant_owned

TABLE = "forge_sessions_copiedmessage"
SESSION = "forge_sessions_session"
FORWARD = [
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, tenant_id)",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_session_id_tenant_fk "
    f"FOREIGN KEY (session_id, tenant_id) REFERENCES {SESSION} (id, tenant_id) "
    "DEFERRABLE INITIALLY DEFERRED",
]
BACKWARD = [
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_session_id_tenant_fk",
    f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey",
    f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id)",
]


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_mask_token_log_entries"),
        ("forge", "0008_citus_keys"),
        ("forge_sessions", "0015_session_copied_through"),
    ]

    operations = [
        migrations.CreateModel(
            name="CopiedMessage",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("message_id", models.CharField(max_length=64)),
                ("source_session_id", models.CharField(max_length=64)),
                ("source_message_id", models.CharField(max_length=64)),
                (
                    "session",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="forge_sessions.session",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["session", "source_session_id", "source_message_id"],
                        name="copiedmessage_source",
                    )
                ],
            },
        ),
        tenant_owned(TABLE),
        postgresql_only(FORWARD, BACKWARD),
    ]
