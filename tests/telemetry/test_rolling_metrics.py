"""Rolling's metrics move: the memory store's signal reaches forge's counters."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from memory import services

pytestmark = pytest.mark.django_db


def value(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_a_rolling_counts_its_run_and_its_time(tenant, user, session):
    runs, sweeps = value("forge_rolling_runs_total"), value("forge_rolling_seconds_count")
    core = services.append_dialogue(
        tenant=tenant,
        user=user,
        agent="build",
        messages=[
            {"role": "user" if i % 2 == 0 else "assistant", "text": f"message {i} about deploys"}
            for i in range(12)
        ],
    )
    outcome = services.roll_core(tenant=tenant, core=core, keep=0)
    assert outcome.status == "rolled"
    assert value("forge_rolling_runs_total") - runs == 1
    assert value("forge_rolling_seconds_count") - sweeps == 1
