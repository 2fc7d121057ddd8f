"""The short chaos soak (``bench/soak.py --short``) against this folder's cluster
(``conftest.cluster``): sessions chat through nginx over HTTP, WebSocket and SSE for
90 s while a daphne is killed with ``kill -9`` and restarted, a Redis shard is
restarted, the replica is stopped and started and the primary is paused. It must end
with no event lost, no reply left open after the lease plus a margin, no duplicate or
out-of-order frame at any client, and ``rebuild_projections --check`` clean.

Server stack only (the cluster has its own PostgreSQL and Redis either way; once is
enough for CI's time).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import ROOT, Cluster

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(600)]


def test_short_soak_with_faults_loses_nothing(cluster: Cluster) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--existing",
            "--short",
            "--sessions",
            "6",
            "--faults",
            "daphne,redis,replica,primary",
        ],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # The faults that had to happen did.
    assert re.search(r"kill -9 daphne-\d+ \(pid \d+\), restarted", out), out
    assert "restart of Redis shard" in out, out
    assert "FAILED" not in out, out
    for line in (
        "events lost: 0",
        "replies left open after the lease + margin: 0",
        "duplicate frames seen by clients: 0",
        "out-of-order frames seen by clients: 0",
        "sessions whose projections differ from their log: 0",
    ):
        assert line in out, out
    assert "projections match the log" in out, out
    turns = re.search(r"turns done: (\d+)", out)
    assert turns, out
    assert int(turns[1]) > 0, out
