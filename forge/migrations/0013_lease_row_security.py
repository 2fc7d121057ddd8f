"""``forge_sessionlease`` under row-level security, like every other tenant-owned table.

The lease names a session, its owner process and the budget a running turn holds; it
had the tenant's id since ``0007`` but no policy, so a lease read that forgot its
session's tenant (a dashboard's or an admin's query) saw every tenant's running turns.
Every reader already runs with the lease's tenant visible (a turn with its session's,
the janitor and start-up recovery with all), so nothing else changes."""

from django.db import migrations

from accounts.rowsecurity import tenant_owned


class Migration(migrations.Migration):
    dependencies = [("forge", "0012_budget_messages")]

    operations = [tenant_owned("forge_sessionlease")]
