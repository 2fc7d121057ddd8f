"""PostgreSQL: ``forge_ids_taken(session, events, messages, parts)``, whether any of a
log's ids is already used, in any tenant.

An import keeps a log's ids only when they are free in the whole database
(``sessions.services.transfer``). That used to be the primary keys' word: an insert of
a taken id failed. Since the keys are ``(id, tenant_id)`` (``forge`` 0008, ready for
Citus) they no longer say it, and a plain query cannot either: under row-level
security the serving role sees its own tenants only. So this function, owned by the
tables' owner and run with its rights (``SECURITY DEFINER``, which row-level security
does not restrict), answers yes or no, and tells nothing else.
"""

from django.db import migrations

from accounts.pgonly import postgresql_only

FUNCTION = """
CREATE OR REPLACE FUNCTION forge_ids_taken(
    session text, events text[], messages text[], parts text[]
) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT EXISTS (SELECT 1 FROM forge_sessions_session WHERE id = session)
        OR EXISTS (SELECT 1 FROM forge_sessions_sessionevent WHERE id = ANY (events))
        OR EXISTS (SELECT 1 FROM forge_sessions_message WHERE id = ANY (messages))
        OR EXISTS (SELECT 1 FROM forge_sessions_part WHERE id = ANY (parts))
$$
"""
DROP = "DROP FUNCTION IF EXISTS forge_ids_taken(text, text[], text[], text[])"


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0012_citus_unique_keys")]

    operations = [postgresql_only([FUNCTION], [DROP])]
