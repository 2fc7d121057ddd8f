import django.db.models.deletion
from django.db import migrations, models

import sessions.models
from accounts.rowsecurity import tenant_owned


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_tenant_visibility"),
        ("forge_sessions", "0010_search_output_head"),
    ]

    operations = [
        migrations.CreateModel(
            name="ContextSnapshot",
            fields=[
                (
                    "session",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="forge_sessions.session",
                    ),
                ),
                ("seq", models.PositiveBigIntegerField()),
                ("hash", sessions.models.HexDigestField(editable=False, max_length=32)),
                ("version", models.PositiveSmallIntegerField()),
                ("state", models.BinaryField()),
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
        ),
        tenant_owned("forge_sessions_contextsnapshot"),
    ]
