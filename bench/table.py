"""What the benchmarks share: printing results as a Markdown table, a fresh database."""

from __future__ import annotations


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Left-aligned header, right-aligned cells, column widths to fit."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")


def use_fresh_database(engine: str, postgres_url: str, name: str) -> None:
    """Point ``DATABASE_URL`` at an empty database for this benchmark process: a new SQLite
    file, or PostgreSQL database ``name`` dropped and created again."""
    import os
    import tempfile

    if engine == "sqlite":
        directory = tempfile.mkdtemp(prefix="forge-bench-")
        os.environ["DATABASE_URL"] = f"sqlite:///{directory}/bench.sqlite3"
        return
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    os.environ["DATABASE_URL"] = postgres_url.rsplit("/", 1)[0] + f"/{name}"
