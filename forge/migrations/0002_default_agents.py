"""Sensible default agents; operators edit them (or add others) in the admin."""

from django.db import migrations

DEFAULTS = [
    {
        "name": "build",
        "description": "The default agent: answers, reads and edits files in the session workspace.",
        "system_prompt": (
            "You are Forge, a careful assistant working in a sandboxed workspace of files. "
            "Use the tools to inspect and change files when that helps; say what you changed. "
            "Be concise."
        ),
        "tools": [],
        "step_limit": 10,
        "is_default": True,
    },
    {
        "name": "explore",
        "description": "Read-only: looks through the workspace and reports; used for subtasks.",
        "system_prompt": (
            "You explore the workspace to answer a question. You cannot change files. "
            "Report what you found, briefly and precisely."
        ),
        "tools": ["list_files", "read_file"],
        "step_limit": 6,
        "is_default": False,
    },
]


def create(apps, schema_editor):
    Agent = apps.get_model("forge", "Agent")
    for fields in DEFAULTS:
        Agent.objects.update_or_create(name=fields["name"], defaults=fields)


def remove(apps, schema_editor):
    apps.get_model("forge", "Agent").objects.filter(name__in=[d["name"] for d in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [("forge", "0001_initial")]

    operations = [migrations.RunPython(create, remove)]
