"""PostgreSQL's part search indexes the first 100,000 characters of a tool output.

Tool outputs are logged whole now (issue 19, item 4: up to
``FORGE_TOOL_OUTPUT_MAX_BYTES``, 10 MB), where they used to be cut at 50,000
characters first. A ``tsvector`` holds at most 1 MB, so indexing a whole output
of a few hundred thousand distinct words failed the write that logged it. The
index (and the query, ``sessions.recall``) now takes an output's head: twice
what was logged before, so search finds all it found. SQLite's FTS5 has no such
limit and is left as it is. ``history_read`` reads any output whole.
"""

from django.db import migrations

EVENT = "forge_sessions_sessionevent"
OUTPUT_HEAD_CHARS = 100_000

# Keep in step with sessions.recall (the query must use the same expression).
POSTGRES_BODY = (
    "to_tsvector('simple'::regconfig, "
    "coalesce(data->>'text', '') || ' ' || coalesce(data->>'tool', '') || ' ' || "
    "coalesce(data#>>'{state,input}', '') || ' ' || "
    f"left(coalesce(data#>>'{{state,output}}', ''), {OUTPUT_HEAD_CHARS}) "
    "|| ' ' || coalesce(data#>>'{state,error}', '') || ' ' || "
    "coalesce(data->>'filename', '') || ' ' || coalesce(data->>'prompt', ''))"
)
OLD_BODY = (
    "to_tsvector('simple'::regconfig, "
    "coalesce(data->>'text', '') || ' ' || coalesce(data->>'tool', '') || ' ' || "
    "coalesce(data#>>'{state,input}', '') || ' ' || coalesce(data#>>'{state,output}', '') "
    "|| ' ' || coalesce(data#>>'{state,error}', '') || ' ' || "
    "coalesce(data->>'filename', '') || ' ' || coalesce(data->>'prompt', ''))"
)


def _index(body: str) -> list[str]:
    return [
        "DROP INDEX IF EXISTS sessionevent_part_search;",
        f"CREATE INDEX sessionevent_part_search ON {EVENT} USING GIN ({body}) "
        "WITH (fastupdate = off) WHERE type = 'part.updated';",
    ]


def _run(body: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in _index(body):
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("forge_sessions", "0009_session_chat_alias"),
    ]

    operations = [migrations.RunPython(_run(POSTGRES_BODY), _run(OLD_BODY))]
