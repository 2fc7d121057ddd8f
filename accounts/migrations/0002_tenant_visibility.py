"""PostgreSQL: ``forge_visible(tenant_id)``, the test every row-level security policy
of a tenant-owned table applies (see ``accounts.tenancy``)."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION forge_visible(tenant bigint) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(current_setting('forge.tenants', true), '') = '*'
        OR tenant::text = ANY (string_to_array(current_setting('forge.tenants', true), ','))
$$;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FUNCTION)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS forge_visible(bigint)")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
