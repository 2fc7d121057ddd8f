"""Full-text search over a session's parts (the recall tools' ``history_search``).

SQLite: an FTS5 table kept in step with the part table by triggers (keyed by
the part row's rowid). PostgreSQL: a GIN index on the parts' tsvector, an
expression index, so nothing else is stored. Both index the same text: a
part's text, tool name, input, output or error, file name, subtask prompt.
"""

from django.db import migrations

PART = "forge_sessions_part"
FTS = "forge_sessions_part_fts"


def _sqlite_body(row: str) -> str:
    fields = [
        "$.text",
        "$.tool",
        "$.state.input",
        "$.state.output",
        "$.state.error",
        "$.filename",
        "$.prompt",
    ]
    return " || ' ' || ".join(f"coalesce(json_extract({row}.data, '{f}'), '')" for f in fields)


SQLITE_FORWARD = [
    f"CREATE VIRTUAL TABLE {FTS} USING fts5("
    "body, session_id UNINDEXED, message_id UNINDEXED, part_id UNINDEXED, tokenize='unicode61')",
    f"""
    CREATE TRIGGER {FTS}_insert AFTER INSERT ON {PART} BEGIN
        INSERT INTO {FTS}(rowid, body, session_id, message_id, part_id)
        VALUES (NEW.rowid, {_sqlite_body("NEW")}, NEW.session_id, NEW.message_id, NEW.id);
    END;
    """,
    f"""
    CREATE TRIGGER {FTS}_update AFTER UPDATE ON {PART} BEGIN
        DELETE FROM {FTS} WHERE rowid = OLD.rowid;
        INSERT INTO {FTS}(rowid, body, session_id, message_id, part_id)
        VALUES (NEW.rowid, {_sqlite_body("NEW")}, NEW.session_id, NEW.message_id, NEW.id);
    END;
    """,
    f"""
    CREATE TRIGGER {FTS}_delete AFTER DELETE ON {PART} BEGIN
        DELETE FROM {FTS} WHERE rowid = OLD.rowid;
    END;
    """,
    f"""
    INSERT INTO {FTS}(rowid, body, session_id, message_id, part_id)
    SELECT rowid, {_sqlite_body(PART)}, session_id, message_id, id FROM {PART};
    """,
]
SQLITE_BACKWARD = [
    f"DROP TRIGGER IF EXISTS {FTS}_insert;",
    f"DROP TRIGGER IF EXISTS {FTS}_update;",
    f"DROP TRIGGER IF EXISTS {FTS}_delete;",
    f"DROP TABLE IF EXISTS {FTS};",
]

# Keep in step with sessions.search.POSTGRES_BODY (the query must use the same expression).
POSTGRES_BODY = (
    "to_tsvector('simple'::regconfig, "
    "coalesce(data->>'text', '') || ' ' || coalesce(data->>'tool', '') || ' ' || "
    "coalesce(data#>>'{state,input}', '') || ' ' || coalesce(data#>>'{state,output}', '') "
    "|| ' ' || coalesce(data#>>'{state,error}', '') || ' ' || "
    "coalesce(data->>'filename', '') || ' ' || coalesce(data->>'prompt', ''))"
)
POSTGRES_FORWARD = [f"CREATE INDEX part_search ON {PART} USING GIN ({POSTGRES_BODY});"]
POSTGRES_BACKWARD = ["DROP INDEX IF EXISTS part_search;"]


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        statements = statements_by_vendor.get(schema_editor.connection.vendor)
        if statements is None:
            raise NotImplementedError(
                f"part search is written for SQLite and PostgreSQL, "
                f"not {schema_editor.connection.vendor}"
            )
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0003_context_index")]

    operations = [
        migrations.RunPython(
            _run({"sqlite": SQLITE_FORWARD, "postgresql": POSTGRES_FORWARD}),
            _run({"sqlite": SQLITE_BACKWARD, "postgresql": POSTGRES_BACKWARD}),
        ),
    ]
