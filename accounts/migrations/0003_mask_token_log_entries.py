"""DRF's token admin logged each token's key as the text of its admin log entries;
Forge never shows a key after its creation (``accounts.tokens``), so those entries
keep only the key's prefix."""

import re

from django.db import migrations

KEY = re.compile(r"[0-9a-f]{40}")
SHOWN = 6
ELLIPSIS = "\u2026"


def mask_keys(apps, schema_editor):
    LogEntry = apps.get_model("admin", "LogEntry")
    ContentType = apps.get_model("contenttypes", "ContentType")
    types = ContentType.objects.filter(app_label="authtoken", model__in=["token", "tokenproxy"])
    for entry in LogEntry.objects.filter(content_type__in=types).iterator():
        if KEY.fullmatch(entry.object_repr):
            entry.object_repr = entry.object_repr[:SHOWN] + ELLIPSIS
            entry.save(update_fields=["object_repr"])


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_tenant_visibility"),
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("authtoken", "0004_alter_tokenproxy_options"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(mask_keys, migrations.RunPython.noop, elidable=True)]
