"""A PostgreSQL primary and its streaming replica of the tests' own (``cluster/pg.py``),
in a temporary directory on free ports, and Django switched to them for a module.

Under ``CI=true`` missing PostgreSQL server binaries fail the tests; elsewhere they skip.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import pg
from tests.live import free_port


@pytest.fixture(scope="module")
def pg_pair() -> Iterator[tuple[pg.Server, pg.Server]]:
    try:
        pg.bindir()
    except FileNotFoundError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the PostgreSQL server binaries: {exc}")
        pytest.skip(str(exc))
    base = Path(tempfile.mkdtemp(prefix="forge-pg-pair-"))
    base.chmod(0o755)  # the postgres user (when run as root) reaches its data directories
    primary = replica = None
    try:
        primary = pg.init_primary(base / "primary", free_port())
        primary.psql("CREATE DATABASE forge_routing")
        replica = pg.make_replica(primary, base / "replica", free_port())
        yield primary, replica
    finally:
        for server in (replica, primary):
            if server is not None:
                server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def routed(pg_pair: tuple[pg.Server, pg.Server], django_db_blocker: Any) -> Iterator[None]:
    """Django's ``default`` is the pair's primary (migrated) and ``replica`` its replica,
    with the replica router installed, for the module; then the suite's database again."""
    from django.core.management import call_command
    from django.db import connections
    from django.test.utils import override_settings

    from forge.settings.base import database_config, replica_config

    primary, replica = pg_pair
    databases = {
        "default": database_config(primary.dsn("forge_routing"), pool=0),
        "replica": replica_config(replica.dsn("forge_routing"), pool=0),
    }
    saved = connections.settings
    with django_db_blocker.unblock():
        _drop_connections(connections, saved)
        connections.settings = connections.configure_settings(databases)
        try:
            with override_settings(DATABASE_ROUTERS=["forge.db.routing.ReplicaRouter"]):
                call_command("migrate", verbosity=0, database="default")
                yield
        finally:
            _drop_connections(connections, connections.settings)
            connections.settings = saved


def _drop_connections(connections: Any, aliases: Any) -> None:
    for alias in aliases:
        if hasattr(connections._connections, alias):
            connections[alias].close()
            delattr(connections._connections, alias)
