from django.db import migrations

from accounts.rowsecurity import tenant_owned


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_tenant_visibility"),
        ("forge_sessions", "0004_part_search"),
    ]
    operations = [
        tenant_owned(
            "forge_sessions_session",
            "forge_sessions_sessionevent",
            "forge_sessions_message",
            "forge_sessions_part",
        )
    ]
