"""Several processes, one scrape: with PROMETHEUS_MULTIPROC_DIR, /metrics' registry sums
what every process counted (prometheus_client's multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]

COUNT = """
from forge.telemetry import metrics
metrics.tool_called("read_file", failed={failed})
metrics.stream_opened("socket")
"""
SCRAPE = """
from prometheus_client import generate_latest
from forge.telemetry.endpoint import _registry
print(generate_latest(_registry()).decode())
"""


def run(code: str, directory: Path) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_the_scrape_sums_every_process(tmp_path):
    run(COUNT.format(failed=False), tmp_path)
    run(COUNT.format(failed=True), tmp_path)
    found = {}
    for family in text_string_to_metric_families(run(SCRAPE, tmp_path)):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert found[("forge_tool_calls_total", (("tool", "read_file"),))] == 2
    assert found[("forge_tool_errors_total", (("tool", "read_file"),))] == 1
    # the gauge sums live processes only: both have exited
    assert found.get(("forge_streams_open", (("face", "socket"),)), 0) == 0


def test_a_process_killed_with_sigkill_leaves_the_live_gauges(tmp_path):
    """A fourth-round finding: a daphne killed with SIGKILL kept its open streams in
    forge_streams_open for good."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    code = COUNT.format(failed=False) + "\nprint('ready', flush=True)\nimport time; time.sleep(60)"
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"

        def streams() -> float:
            for family in text_string_to_metric_families(run(SCRAPE, tmp_path)):
                for sample in family.samples:
                    if sample.name == "forge_streams_open":
                        return sample.value
            return 0

        assert streams() == 1  # alive: counted
        process.kill()
        process.wait(10)
        assert streams() == 0
    finally:
        process.kill()
        process.wait(10)
