"""The log's unique key ``(session, seq)`` holds the tenant too: ``(session, seq,
tenant)``, so that the table can be distributed by ``tenant_id`` under Citus (a
distributed table's unique constraints must hold its distribution column;
``forge.db.citus``). The leading ``(session_id, seq)`` still serve every read of the
log, and the constraint keeps its name (``sessions.sql.SEQ_CONSTRAINT``). A
projection row's pointer at its event joins on all three.

PostgreSQL only, in the database: the constraint is dropped and added again with the
tenant. SQLite keeps ``(session, seq)``, which is stricter, and is not remade (that
would drop the log's append-only triggers): only Django's state changes there.
"""

import django.db.models.deletion
from django.db import migrations, models

from accounts.pgonly import postgresql_only

EVENT = "forge_sessions_sessionevent"
FORWARD = [
    f"ALTER TABLE {EVENT} DROP CONSTRAINT sessionevent_session_seq",
    f"ALTER TABLE {EVENT} ADD CONSTRAINT sessionevent_session_seq "
    "UNIQUE (session_id, seq, tenant_id)",
]
BACKWARD = [
    f"ALTER TABLE {EVENT} DROP CONSTRAINT sessionevent_session_seq",
    f"ALTER TABLE {EVENT} ADD CONSTRAINT sessionevent_session_seq UNIQUE (session_id, seq)",
]


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_mask_token_log_entries"),
        ("forge_sessions", "0011_context_snapshot"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[postgresql_only(FORWARD, BACKWARD)],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="sessionevent",
                    name="sessionevent_session_seq",
                ),
                migrations.AlterField(
                    model_name="message",
                    name="event",
                    field=models.ForeignObject(
                        from_fields=("session", "seq", "tenant"),
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="forge_sessions.sessionevent",
                        to_fields=("session", "seq", "tenant"),
                    ),
                ),
                migrations.AlterField(
                    model_name="part",
                    name="event",
                    field=models.ForeignObject(
                        from_fields=("session", "seq", "tenant"),
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="forge_sessions.sessionevent",
                        to_fields=("session", "seq", "tenant"),
                    ),
                ),
                migrations.AddConstraint(
                    model_name="sessionevent",
                    constraint=models.UniqueConstraint(
                        fields=("session", "seq", "tenant"), name="sessionevent_session_seq"
                    ),
                ),
            ],
        ),
    ]
