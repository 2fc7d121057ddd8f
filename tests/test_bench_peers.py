"""The peer benchmark (``bench/peers/run.py``) runs without any peer installed.

Its Forge side runs for real (a quick run: a few turns on a fresh SQLite file); a peer is
stood in for by a "virtual environment" whose python is a shell script printing fixed
results, so the runner's protocol, its table and the Forge / peer ratios are checked
without the peers' packages. A peer whose environment is missing is skipped with a note.
The timings are never asserted: only that they were measured and put where they belong.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUB_TURN_MS = 2.0
STUB_BYTES = 4_000_000

STUB_PYTHON = f"""#!/bin/sh
case "$*" in
  *"--workload describe"*)
    echo '{{"variants": {{"": "Stub SDK"}}, "versions": {{"stub-sdk": "9.9"}}}}' ;;
  *"--workload store"*)
    echo '{{"system": "Stub SDK", "workload": "store", "base_bytes": 0, "at": {{'\\
'"10": {{"append_ms": 1.0, "load_ms": 1.0, "bytes": {STUB_BYTES}}}, '\\
'"20": {{"append_ms": 1.0, "load_ms": 1.0, "bytes": {STUB_BYTES}}}, '\\
'"40": {{"append_ms": 1.0, "load_ms": 1.0, "bytes": {STUB_BYTES}, '\\
'"append_mean_ms": 1.5, "append_p99_ms": 3.0}}}}}}' ;;
  *"--workload turn"*)
    echo '{{"system": "Stub SDK", "workload": "turn", "turns": 10, '\\
'"median_ms": {STUB_TURN_MS}, "mean_ms": {STUB_TURN_MS}}}' ;;
  *) exit 2 ;;
esac
"""


def rows(output: str) -> dict[str, list[str]]:
    """The printed Markdown table, by its first cell."""
    table = [line for line in output.splitlines() if line.startswith("| ")]
    return {
        cells[0]: cells[1:]
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table)
    }


@pytest.mark.sqlite_only  # the benchmark is SQLite-only: the server pass would repeat it
@pytest.mark.timeout(240)
def test_quick_run_measures_forge_and_prints_the_ratio_to_each_peer(tmp_path):
    python = tmp_path / "venvs" / "openai-agents" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "DJANGO_"))}
    done = subprocess.run(
        [sys.executable, "bench/peers/run.py", "--quick", "--venvs", str(tmp_path / "venvs")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    header = table["system"]
    turn = header.index("turn ms (10 turns)")
    assert header[turn + 1 :] == ["append mean ms N=40", "append p99 ms N=40"]
    assert [h for h in header if h.startswith("MB")] == ["MB N=10", "MB N=20", "MB N=40"]
    forge, stub, ratio = table["Forge"], table["Stub SDK"], table["Forge / Stub SDK"]
    assert all(float(cell) > 0 for cell in forge), forge  # every column measured
    assert stub[turn] == "2.00"
    assert stub[turn + 1 :] == ["1.50", "3.00"]
    assert stub[header.index("MB N=40")] == "4.00"
    # The ratio is Forge's median over the stub's, column by column (cells are rounded).
    for column in (header.index("MB N=40"), turn, len(header) - 1):
        expected = float(forge[column]) / float(stub[column])
        assert float(ratio[column].rstrip("x")) == pytest.approx(expected, rel=0.06)
    notes = [line for line in done.stdout.splitlines() if line.startswith("note:")]
    assert any(n.startswith("note: LangGraph skipped: no virtual environment") for n in notes)
    assert any(n.startswith("note: Google ADK skipped: no virtual environment") for n in notes)
    assert "stub-sdk 9.9" in done.stdout


@pytest.fixture
def peer_forge():
    sys.path.insert(0, str(ROOT / "bench" / "peers"))
    try:
        import peer_forge

        yield peer_forge
    finally:
        sys.path.remove(str(ROOT / "bench" / "peers"))


def test_forge_store_turn_is_the_runtimes_writes_and_the_next_request_holds_it(peer_forge, session):
    """The benchmark's Forge turn writes what the runtime writes for a one-step text reply
    (8 events), and the model input derived from the log holds every turn, in order."""
    from forge.context import request_for
    from sessions.models import SessionEvent

    events = SessionEvent.objects.filter(session=session).order_by("seq")
    before = events.count()
    peer_forge.write_turn(session, 0)
    peer_forge.write_turn(session, 1)
    written = list(events.filter(seq__gt=before).values_list("type", "data"))
    turn = ["message.updated", "part.updated", "message.updated"] + ["part.updated"] * 4
    assert [kind for kind, _ in written] == [*turn, "message.updated"] * 2
    parts = [data["type"] for kind, data in written[:8] if kind == "part.updated"]
    assert parts == ["text", "step-start", "text", "text", "step-finish"]
    assert written[7][1]["finish"] == "stop"
    _, request = request_for(session)
    assert [m["role"] for m in request.messages] == ["user", "assistant"] * 2
    texts = [str(m["content"]) for m in request.messages]
    common = peer_forge.common
    assert all(common.USER_TEXT in t for t in texts[0::2])
    assert all(common.REPLY_TEXT in t for t in texts[1::2])


def test_forge_store_turns_fold_onto_the_cached_context(peer_forge, session, settings):
    """The benchmark measures what a warm process pays: its turns' ids are in the
    runtime's order (the step-start's before the text part's), so the context cache
    folds each turn instead of falling back to the full derivation."""
    from forge.context import request_for
    from forge.context.incremental import cache

    settings.FORGE_CONTEXT_CACHE_SIZE = 16
    cache.clear()
    for n in range(5):
        peer_forge.write_turn(session, n)
        request_for(session)
    assert cache.stats["hit"] == 4
    assert not [reason for reason in cache.stats if "fallback" in reason or "full" in reason]
