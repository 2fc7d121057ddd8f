"""Projections stop copying the log: ``Message`` and ``Part`` rows lose their ``data``
column and read it from the event they point at (``session``, ``seq``).

Every row's ``data`` was, by construction (``projector``), the ``data`` of the
event at its ``seq``; the migration checks that first and refuses to drop a
column that holds anything else (run ``manage.py rebuild_projections`` and
migrate again).

Part search follows the text into the log:

* SQLite: the FTS5 table becomes an external-content table over a view that
  reads each part's text from its event, so the text is stored once (in the
  log) plus the index itself. Its triggers remove a row's old terms with
  FTS5's ``'delete'`` command, which needs the old text: the old event, which
  the log keeps (parts are always deleted before their session's events, see
  ``services.delete_session``).
* PostgreSQL: the GIN index moves from the parts' tsvector to the tsvector of
  the ``part.updated`` events (a partial expression index, without the pending
  list); the search joins a session's parts to their current events.
"""

import django.db.models.deletion
from django.db import migrations, models

PART = "forge_sessions_part"
MESSAGE = "forge_sessions_message"
EVENT = "forge_sessions_sessionevent"
FTS = "forge_sessions_part_fts"
CONTENT = "forge_sessions_part_fts_content"

SEARCH_FIELDS = [
    "$.text",
    "$.tool",
    "$.state.input",
    "$.state.output",
    "$.state.error",
    "$.filename",
    "$.prompt",
]


def sqlite_body(data: str) -> str:
    """The indexed text of a part's wire dict ``data`` (the same fields as 0004)."""
    return " || ' ' || ".join(f"coalesce(json_extract({data}, '{f}'), '')" for f in SEARCH_FIELDS)


def _event_body(row: str) -> str:
    return (
        f"(SELECT {sqlite_body('e.data')} FROM {EVENT} e "
        f"WHERE e.session_id = {row}.session_id AND e.seq = {row}.seq)"
    )


SQLITE_DROP_SEARCH = [
    f"DROP TRIGGER IF EXISTS {FTS}_insert;",
    f"DROP TRIGGER IF EXISTS {FTS}_update;",
    f"DROP TRIGGER IF EXISTS {FTS}_delete;",
    f"DROP TABLE IF EXISTS {FTS};",
    f"DROP VIEW IF EXISTS {CONTENT};",
]
SQLITE_SEARCH = [
    f"""
    CREATE VIEW {CONTENT} AS
    SELECT p.rowid AS rowid, {sqlite_body("e.data")} AS body
    FROM {PART} p JOIN {EVENT} e ON e.session_id = p.session_id AND e.seq = p.seq;
    """,
    f"CREATE VIRTUAL TABLE {FTS} USING fts5("
    f"body, content='{CONTENT}', content_rowid='rowid', tokenize='unicode61')",
    f"""
    CREATE TRIGGER {FTS}_insert AFTER INSERT ON {PART} BEGIN
        INSERT INTO {FTS}(rowid, body) VALUES (NEW.rowid, {_event_body("NEW")});
    END;
    """,
    f"""
    CREATE TRIGGER {FTS}_update AFTER UPDATE ON {PART} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, body) VALUES ('delete', OLD.rowid, {_event_body("OLD")});
        INSERT INTO {FTS}(rowid, body) VALUES (NEW.rowid, {_event_body("NEW")});
    END;
    """,
    f"""
    CREATE TRIGGER {FTS}_delete AFTER DELETE ON {PART} BEGIN
        INSERT INTO {FTS}({FTS}, rowid, body) VALUES ('delete', OLD.rowid, {_event_body("OLD")});
    END;
    """,
    f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild');",
]

# Keep in step with sessions.recall (the query must use the same expression).
POSTGRES_BODY = (
    "to_tsvector('simple'::regconfig, "
    "coalesce(data->>'text', '') || ' ' || coalesce(data->>'tool', '') || ' ' || "
    "coalesce(data#>>'{state,input}', '') || ' ' || coalesce(data#>>'{state,output}', '') "
    "|| ' ' || coalesce(data#>>'{state,error}', '') || ' ' || "
    "coalesce(data->>'filename', '') || ' ' || coalesce(data->>'prompt', ''))"
)
POSTGRES_DROP_SEARCH = ["DROP INDEX IF EXISTS part_search;"]
# fastupdate off: with the default pending list (gin_pending_list_limit, 4 MB) the
# index held every new entry uncompressed until a VACUUM, ~9x the merged size
# (bench/storage.py: 1,800 vs 200 bytes per turn), for ~10 µs less per insert.
POSTGRES_SEARCH = [
    f"CREATE INDEX sessionevent_part_search ON {EVENT} USING GIN ({POSTGRES_BODY}) "
    "WITH (fastupdate = off) WHERE type = 'part.updated';"
]
POSTGRES_UNDO_SEARCH = ["DROP INDEX IF EXISTS sessionevent_part_search;"]


class ProjectionDiverges(RuntimeError):
    """A projection row's data is not its event's: dropping it would lose something."""


def _check_copies(apps, schema_editor):
    """Refuse to drop ``data`` unless every row's copy equals its event's data."""
    postgres = schema_editor.connection.vendor == "postgresql"
    same = "p.data = e.data" if postgres else "json(p.data) = json(e.data)"
    with schema_editor.connection.cursor() as cursor:
        for table in (MESSAGE, PART):
            cursor.execute(
                f"SELECT count(*) FROM {table} p LEFT JOIN {EVENT} e "  # noqa: S608
                f"ON e.session_id = p.session_id AND e.seq = p.seq "
                f"WHERE e.id IS NULL OR NOT ({same})"
            )
            (diverging,) = cursor.fetchone()
            if diverging:
                raise ProjectionDiverges(
                    f"{diverging} rows of {table} differ from the events they point at; "
                    "run `manage.py rebuild_projections` and migrate again"
                )


def _copy_back(apps, schema_editor):
    """Backwards: put each row's event data back into its (re-added) ``data`` column."""
    for table in (MESSAGE, PART):
        schema_editor.execute(
            f"UPDATE {table} SET data = (SELECT e.data FROM {EVENT} e "  # noqa: S608
            f"WHERE e.session_id = {table}.session_id AND e.seq = {table}.seq)",
            params=None,
        )


def _run(statements_by_vendor):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor not in statements_by_vendor:
            raise NotImplementedError(f"part search is written for SQLite and PostgreSQL, not {vendor}")
        for statement in statements_by_vendor[vendor]:
            schema_editor.execute(statement, params=None)

    return run


def _restore_0004(apps, schema_editor):
    from importlib import import_module

    old = import_module("sessions.migrations.0004_part_search")
    _run({"sqlite": old.SQLITE_FORWARD, "postgresql": old.POSTGRES_FORWARD})(apps, schema_editor)


def _pointer():
    return models.ForeignObject(
        default=None,
        from_fields=["session", "seq"],
        on_delete=django.db.models.deletion.DO_NOTHING,
        related_name="+",
        to="forge_sessions.sessionevent",
        to_fields=["session", "seq"],
    )


class Migration(migrations.Migration):
    dependencies = [("forge_sessions", "0005_row_level_security")]

    operations = [
        migrations.RunPython(_check_copies, migrations.RunPython.noop),
        # The search of 0004 reads parts' data: take it down before the column goes.
        migrations.RunPython(
            _run({"sqlite": SQLITE_DROP_SEARCH, "postgresql": POSTGRES_DROP_SEARCH}),
            _restore_0004,
        ),
        # Nullable first, so that going backwards can re-add the column empty and
        # fill it from the log before it is NOT NULL again.
        migrations.AlterField(model_name="message", name="data", field=models.JSONField(null=True)),
        migrations.AlterField(model_name="part", name="data", field=models.JSONField(null=True)),
        migrations.RunPython(migrations.RunPython.noop, _copy_back),
        migrations.RemoveField(model_name="message", name="data"),
        migrations.RemoveField(model_name="part", name="data"),
        # The pointers are joins, not columns: state only (SQLite's schema editor cannot
        # remove a ForeignObject when migrating backwards).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="message", name="event", field=_pointer(), preserve_default=False
                ),
                migrations.AddField(
                    model_name="part", name="event", field=_pointer(), preserve_default=False
                ),
            ]
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE_SEARCH, "postgresql": POSTGRES_SEARCH}),
            _run({"sqlite": SQLITE_DROP_SEARCH, "postgresql": POSTGRES_UNDO_SEARCH}),
        ),
    ]
