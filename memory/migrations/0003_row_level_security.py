from django.db import migrations

from accounts.rowsecurity import tenant_owned


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_tenant_visibility"),
        ("memory", "0002_search"),
    ]
    operations = [
        tenant_owned(
            "memory_memorycore",
            "memory_dialoguemessage",
            "memory_memoryunit",
            "memory_memorymessage",
            "memory_memoryslice",
        )
    ]
