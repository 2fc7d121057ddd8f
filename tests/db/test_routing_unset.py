"""With no replica configured (``DATABASE_REPLICA_URL`` unset) routing changes nothing."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connections

from forge.db import routing


def test_without_a_replica_every_read_is_on_the_primary() -> None:
    assert "replica" not in connections.settings
    assert not getattr(settings, "DATABASE_ROUTERS", [])
    assert routing.replica_alias() == routing.PRIMARY
    assert routing.lagging_read(lambda: routing._reads_on.get()) == routing.PRIMARY


def test_the_replica_settings_come_from_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    from forge.settings.base import replica_config

    config = replica_config("postgres://reader@10.0.0.2:5433/forge")
    assert config["HOST"] == "10.0.0.2"
    assert config["PORT"] == 5433
    assert config["OPTIONS"]["connect_timeout"] == 2
    # the pool's wait too (a third-round finding: 30 s, the primary's, held every
    # request of the process while the replica was down)
    assert config["OPTIONS"]["pool"]["timeout"] == 2
    assert config["TEST"] == {"MIRROR": "default"}
