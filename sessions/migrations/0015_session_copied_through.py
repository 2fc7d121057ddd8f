"""``Session.copied_through``: the seq through which a session's log was imported or
forked, not run here; usage bills nothing logged through it. Nullable, so that SQLite
adds the column without remaking the table, and PostgreSQL without rewriting it.
Sessions imported before it stay NULL (``rebuild_usage`` still counts their replies)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0014_compact_events")]

    operations = [
        migrations.AddField(
            model_name="session",
            name="copied_through",
            field=models.PositiveBigIntegerField(blank=True, editable=False, null=True),
        )
    ]
