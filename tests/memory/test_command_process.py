"""``roll_dialogs`` as real processes against the test database: exit statuses, SIGTERM,
SIGKILL in the middle of a sweep, and two sweeps at once."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from tests.live import server_env

from .conftest import talk, turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
TURNS = 3  # 6 messages: exactly the threshold below
ARGS = ["--threshold", "6", "--keep", "2"]


def command(*args: str) -> list[str]:
    return [sys.executable, "manage.py", "roll_dialogs", *args]


def env(**extra: str) -> dict[str, str]:
    return server_env(FORGE_MEMORY_SUMMARIZER_TIMEOUT="30", **extra)


def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), cwd=ROOT, env=env(**extra), capture_output=True, text=True, timeout=60
    )


def start(*args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command(*args),
        cwd=ROOT,
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def make_cores(tenant: Any, user: Any, count: int) -> list[MemoryCore]:
    return [
        talk(tenant=tenant, user=user, agent=f"agent-{n:02d}", turns=TURNS, first=n * 100)
        for n in range(count)
    ]


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def texts(n: int) -> list[str]:
    return [m["text"] for i in range(n * 100, n * 100 + TURNS) for m in turn(i)]


def state_of(core: MemoryCore) -> str:
    """'untouched' or 'rolled'; fails on anything in between."""
    n = int(core.agent.split("-")[1])
    stored = MemoryCore.objects.get(pk=core.pk)
    window = list(
        DialogueMessage.objects.filter(core=core).order_by("seq").values_list("text", flat=True)
    )
    units = list(MemoryUnit.objects.filter(core=core))
    if stored.rolled_seq == 0:
        assert stored.window_count == 6
        assert window == texts(n)
        assert units == []
        return "untouched"
    # Rolled: all but the 2 newest (keep), which stay in the window unrolled.
    assert stored.rolled_seq == 4
    assert stored.window_count == 2
    assert window == texts(n)[-2:]
    [unit] = units
    messages = list(
        MemoryMessage.objects.filter(unit=unit).order_by("index").values_list("text", flat=True)
    )
    assert messages == texts(n)[:4]  # never appended twice, never missing
    [item] = MemorySlice.objects.filter(unit=unit)
    assert (item.start_index, item.end_index) == (0, 4)
    assert (unit.message_count, unit.slice_count) == (4, 1)
    return "rolled"


def test_once_in_a_process_rolls_and_exits_zero(tenant, user):
    cores = make_cores(tenant, user, 3)
    done = run("--once", "--json", *ARGS)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["counts"] == {"rolled": 3}
    assert "Traceback" not in done.stderr
    assert "%|" not in done.stderr  # no progress bar without a terminal
    assert {state_of(core) for core in cores} == {"rolled"}
    assert all(MemorySlice.objects.values_list("indexed", flat=True))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "0"], "--threshold must be a positive integer"),
        (["--core", "mco_NOPE"], "no memory core 'mco_NOPE'"),
        (["--idle-after", "-1"], "--idle-after must be positive"),
    ],
)
def test_bad_options_exit_non_zero_with_a_message(db, args, message):
    done = run(*args)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_failing_summarizer_exits_non_zero_naming_the_core(tenant, user):
    [core] = make_cores(tenant, user, 1)
    done = run(*ARGS, FORGE_MEMORY_SUMMARIZER="tests.memory.summarizers.failing")
    assert done.returncode == 1
    assert f"1 core failed to roll: {core.pk} (summarizer_failed:" in done.stderr
    assert "Traceback" not in done.stderr
    assert state_of(core) == "untouched"


def test_a_progress_bar_on_a_terminal(tenant, user):
    make_cores(tenant, user, 2)
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    try:
        process = subprocess.Popen(
            command("--once", *ARGS), cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=child
        )
        os.close(child)
        child = -1
        output = b""
        while True:
            try:
                chunk = os.read(parent, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        assert process.wait(30) == 0
    finally:
        os.close(parent)
        if child != -1:
            os.close(child)
    assert b"rolling:" in output
    assert b"/2 " in output


def test_sigterm_finishes_the_core_in_hand_and_stops(tenant, user):
    cores = make_cores(tenant, user, 6)
    process = start(
        "--once",
        "--json",
        *ARGS,
        FORGE_MEMORY_SUMMARIZER="tests.memory.summarizers.sleepy",
        FORGE_TEST_SUMMARIZER_SLEEP="0.4",
    )
    wait_until(lambda: MemorySlice.objects.exists())
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    report = json.loads(out)
    assert report["stopped"]
    states = [state_of(core) for core in cores]
    assert 1 <= states.count("rolled") < 6
    assert report["counts"] == {"rolled": states.count("rolled")}


def test_loop_rolls_what_becomes_due_until_sigterm(tenant, user):
    process = start("--loop", "--interval", "0.1", *ARGS)
    try:
        [core] = make_cores(tenant, user, 1)
        wait_until(lambda: MemorySlice.objects.exists())
        assert state_of(core) == "rolled"
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "1 rolled" in out


def test_sigkill_mid_sweep_leaves_every_core_untouched_or_fully_rolled(tenant, user, tmp_path):
    cores = make_cores(tenant, user, 8)
    log = tmp_path / "calls.log"
    process = start(
        "--once",
        *ARGS,
        FORGE_MEMORY_SUMMARIZER="tests.memory.summarizers.sleepy",
        FORGE_TEST_SUMMARIZER_SLEEP="0.3",
        FORGE_TEST_SUMMARIZER_LOG=str(log),
    )
    wait_until(lambda: MemorySlice.objects.count() >= 2)
    time.sleep(0.15)  # most likely inside the next summarizer call
    process.kill()
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    states = [state_of(core) for core in cores]
    assert "rolled" in states
    assert "untouched" in states
    # A second run finishes the job, indexing any slice the dead one left unindexed.
    done = run("--once", "--json", *ARGS)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"] == {"rolled": states.count("untouched")}
    assert {state_of(core) for core in cores} == {"rolled"}
    assert all(MemorySlice.objects.values_list("indexed", flat=True))


def test_sigkill_at_any_moment_never_half_rolls_a_core(tenant, user):
    """Kill sweeps after varying delays (landing in reads, summaries and commits); every
    core is always untouched or fully rolled, and a last run completes them all."""
    cores = make_cores(tenant, user, 12)
    for delay in (0.9, 1.0, 1.1, 1.2, 1.3, 1.5):  # start-up takes most of a second
        process = start(
            "--once",
            *ARGS,
            FORGE_MEMORY_SUMMARIZER="tests.memory.summarizers.sleepy",
            FORGE_TEST_SUMMARIZER_SLEEP="0.01",
        )
        time.sleep(delay)
        process.kill()
        process.communicate(timeout=30)
        for core in cores:
            state_of(core)
    done = run("--once", *ARGS)
    assert done.returncode == 0, done.stderr
    assert {state_of(core) for core in cores} == {"rolled"}


@pytest.mark.postgres_only
def test_two_sweeps_at_once_roll_each_core_exactly_once(tenant, user, tmp_path):
    cores = make_cores(tenant, user, 30)
    log = tmp_path / "calls.log"
    extra = {
        "FORGE_MEMORY_SUMMARIZER": "tests.memory.summarizers.sleepy",
        "FORGE_TEST_SUMMARIZER_SLEEP": "0.05",
        "FORGE_TEST_SUMMARIZER_LOG": str(log),
    }
    processes = [start("--once", "--json", *ARGS, **extra) for _ in range(2)]
    reports = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        reports.append(json.loads(out))
    assert sum(r["counts"].get("rolled", 0) for r in reports) == 30
    assert all(r["counts"].get("rolled", 0) > 0 for r in reports), reports  # both worked
    assert {state_of(core) for core in cores} == {"rolled"}
    calls = log.read_text().splitlines()
    assert len(calls) == 30  # each core summarized once: no work thrown away
    assert len({line.split()[0] for line in calls}) == 2
