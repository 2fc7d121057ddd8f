"""Make the log append-only in the database itself, on SQLite and PostgreSQL.

UPDATE of an event is always refused. DELETE is refused unless the event's
session is marked ``deleting`` (set by ``services.delete_session`` in the same
transaction that deletes the session with its log).
"""

from django.db import migrations

EVENT = "forge_sessions_sessionevent"
SESSION = "forge_sessions_session"

SQLITE_FORWARD = [
    f"""
    CREATE TRIGGER forge_sessionevent_no_update BEFORE UPDATE ON {EVENT}
    BEGIN
        SELECT RAISE(ABORT, '{EVENT} is append-only: an event cannot be updated');
    END;
    """,
    f"""
    CREATE TRIGGER forge_sessionevent_no_delete BEFORE DELETE ON {EVENT}
    WHEN NOT EXISTS (SELECT 1 FROM {SESSION} WHERE id = OLD.session_id AND deleting)
    BEGIN
        SELECT RAISE(ABORT, '{EVENT} is append-only: delete the whole session instead');
    END;
    """,
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS forge_sessionevent_no_update;",
    "DROP TRIGGER IF EXISTS forge_sessionevent_no_delete;",
]

POSTGRES_FORWARD = [
    f"""
    CREATE OR REPLACE FUNCTION forge_sessionevent_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND EXISTS (
            SELECT 1 FROM {SESSION} WHERE id = OLD.session_id AND deleting
        ) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION '{EVENT} is append-only: % of an event refused', TG_OP
            USING ERRCODE = 'restrict_violation',
                  HINT = 'delete the whole session (sessions.services.delete_session)';
    END
    $$;
    """,
    f"""
    CREATE TRIGGER forge_sessionevent_append_only
    BEFORE UPDATE OR DELETE ON {EVENT}
    FOR EACH ROW EXECUTE FUNCTION forge_sessionevent_append_only();
    """,
]
POSTGRES_BACKWARD = [
    f"DROP TRIGGER IF EXISTS forge_sessionevent_append_only ON {EVENT};",
    "DROP FUNCTION IF EXISTS forge_sessionevent_append_only();",
]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        statements = statements_by_vendor.get(schema_editor.connection.vendor)
        if statements is None:
            raise NotImplementedError(
                f"append-only triggers are written for SQLite and PostgreSQL, "
                f"not {schema_editor.connection.vendor}"
            )
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0001_initial")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
    ]
