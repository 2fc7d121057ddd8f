"""A session's chat alias: the id a client chose for it as a chat (the AI SDK's ``useChat``
id), unique within its tenant only (issue 17). Before, a chat id became the session's
own id, unique in the whole database: a tenant could take an id another tenant's
client would choose, and see whether it existed. A nullable column and a partial
unique index; no row changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("forge_sessions", "0008_hash_bytes"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="chat_alias",
            field=models.CharField(blank=True, editable=False, max_length=64, null=True),
        ),
        migrations.AddConstraint(
            model_name="session",
            constraint=models.UniqueConstraint(
                condition=models.Q(("chat_alias__isnull", False)),
                fields=("tenant", "chat_alias"),
                name="session_tenant_chat_alias",
            ),
        ),
    ]
