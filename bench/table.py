"""What the benchmarks share: printing results as a Markdown table, a fresh database."""

from __future__ import annotations

from typing import Any


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


DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"


def engine_arguments(parser: Any) -> None:
    """``--engines``, ``--postgres-url`` and the hidden ``--worker`` every engine bench takes."""
    import argparse
    import os

    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("FORGE_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="a server where a scratch database may be created and dropped",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def run_worker(script: str, argv: list[str], worker: str) -> dict[str, Any]:
    """Run ``script`` in a process of its own with ``argv`` and ``--worker WORKER``, and
    return the JSON it prints last (exit with its stderr's end when it fails)."""
    import json
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, script, *argv, "--worker", worker],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        sys.exit(f"{worker} run failed:\n{child.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


def per_engine(script: str, engines: str, argv: list[str]) -> list[dict[str, Any]]:
    """Run ``script`` once per engine, each in a process of its own (``--worker ENGINE``
    and the same arguments), and collect the JSON each prints last."""
    return [run_worker(script, argv, engine) for engine in engines.split(",")]


def start_django(engine: str, postgres_url: str, name: str, **env: str) -> None:
    """In a benchmark's worker process: an empty database (:func:`use_fresh_database`),
    the development settings without Redis (the in-memory channel layer) plus ``env``,
    Django set up and migrated."""
    import os
    import sys
    from pathlib import Path

    use_fresh_database(engine, postgres_url, name)
    os.environ.pop("REDIS_URL", None)
    os.environ.update({"FORGE_DEBUG": "0", "DJANGO_SETTINGS_MODULE": "forge.settings.dev", **env})
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
