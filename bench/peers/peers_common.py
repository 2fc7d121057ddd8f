"""What every peer script shares: the workloads, the fake model's deltas, timing, output.

This module is imported by scripts that run in the peers' own virtual environments,
so it uses the standard library only (the table printing is imported lazily, by the
runner, from ``bench/table.py``).

The workloads are the same on every system:

* **store** — one session on a fresh SQLite file grows by one turn at a time (a user
  message and an assistant reply of ~400 characters each) up to the largest of
  ``sizes``; every append is timed; at each size the system's own "load the next
  turn's model input" is timed ``loads`` times and the database file (plus WAL,
  after a checkpoint) is measured.
* **turn** — ``turns`` whole turns through the system's own agent loop, in one
  session on a fresh SQLite file, each model call an in-process fake streaming
  :data:`DELTAS` (80 deltas, zero delay); every turn is timed from the call that
  starts it to the finished reply, inside one event loop.

A script prints one JSON object on its last line of stdout (:func:`emit`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SIZES = (100, 400, 1_600)
QUICK_SIZES = (10, 20, 40)
TURNS = 100
QUICK_TURNS = 10
LOADS = 5
WARMUP_TURNS = 3

# ~400 characters each: the store's user message and assistant reply.
USER_TEXT = ("Please summarise the attached notes about the quarterly plan. " * 7)[:400]
REPLY_TEXT = ("The plan moves the launch to May and keeps the budget flat. " * 7)[:400]

# The fake model's reply in the turn workload: 80 deltas of 5 characters (400 characters).
DELTAS = [REPLY_TEXT[i : i + 5] for i in range(0, 400, 5)]
assert len(DELTAS) == 80
assert "".join(DELTAS) == REPLY_TEXT


def arguments(argv: list[str] | None = None) -> Any:
    """The arguments every peer script takes (the runner passes them through)."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=["store", "turn", "describe"], required=True)
    parser.add_argument("--variant", default="", help="which of the script's systems")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--loads", type=int, default=LOADS)
    parser.add_argument("--turns", type=int, default=TURNS)
    args = parser.parse_args(argv)
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    return args


def emit(result: dict[str, Any]) -> None:
    """The script's result: one JSON line, last on stdout."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def versions(*distributions: str) -> dict[str, str]:
    """Installed versions of the named distributions (what the table reports)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in distributions:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "?"
    return found


@contextmanager
def scratch_directory(prefix: str) -> Iterator[Path]:
    """A fresh directory for one run's database, removed afterwards."""
    import shutil

    directory = Path(tempfile.mkdtemp(prefix=f"forge-peers-{prefix}-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def sqlite_bytes(path: str | os.PathLike[str]) -> int:
    """The database file and its WAL/journal, after a TRUNCATE checkpoint.

    The checkpoint runs on a connection of its own; a system still holding its own
    connection keeps its pages in the main file, which is what we want measured.
    """
    import sqlite3

    path = Path(path)
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return sum(
        p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-journal")) if p.exists()
    )


def timed(call: Callable[[], Any]) -> float:
    """Seconds one call took."""
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def p99_ms(seconds: list[float]) -> float:
    """The 99th percentile (nearest rank) in ms: the turns that pay for a periodic
    write (a snapshot, a checkpoint), which a median does not show."""
    ordered = sorted(seconds)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)] * 1000


class StoreRun:
    """Collects a store run: append times per turn, and per size the load time and bytes."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.appends: list[float] = []
        self.at: dict[str, dict[str, float]] = {}
        self.base_bytes = 0  # the empty store: schema, and for Forge its user and tenant

    def record_size(self, size: int, loads: list[float], size_bytes: int) -> None:
        self.at[str(size)] = {
            "append_ms": median_ms(self.appends[:size]),
            "append_mean_ms": statistics.fmean(self.appends[:size]) * 1000,
            "append_p99_ms": p99_ms(self.appends[:size]),
            "load_ms": median_ms(loads),
            "bytes": size_bytes,
        }

    def result(self, **extra: Any) -> dict[str, Any]:
        return {"workload": "store", "at": self.at, "base_bytes": self.base_bytes, **extra}


def run_store(
    args: Any,
    *,
    append: Callable[[int], Any],
    load: Callable[[], Any],
    size_bytes: Callable[[], int],
) -> dict[str, Any]:
    """The store workload with synchronous callables: ``append(n)`` writes turn ``n``."""
    run = StoreRun(args.sizes)
    run.base_bytes = size_bytes()
    done = 0
    for size in args.sizes:
        while done < size:
            began = time.perf_counter()
            append(done)
            run.appends.append(time.perf_counter() - began)
            done += 1
        load()  # the first load after writes may pay for a cold statement cache
        loads = [timed(load) for _ in range(args.loads)]
        run.record_size(size, loads, size_bytes())
    return run.result()


async def arun_store(
    args: Any,
    *,
    append: Callable[[int], Any],
    load: Callable[[], Any],
    size_bytes: Callable[[], int],
) -> dict[str, Any]:
    """The store workload with coroutine functions (``size_bytes`` stays synchronous)."""
    run = StoreRun(args.sizes)
    run.base_bytes = size_bytes()
    done = 0
    for size in args.sizes:
        while done < size:
            began = time.perf_counter()
            await append(done)
            run.appends.append(time.perf_counter() - began)
            done += 1
        await load()
        loads = []
        for _ in range(args.loads):
            began = time.perf_counter()
            await load()
            loads.append(time.perf_counter() - began)
        run.record_size(size, loads, size_bytes())
    return run.result()


async def arun_turns(args: Any, turn: Callable[[int], Any], *, warmup: Any = None) -> dict:
    """The turn workload: ``warmup`` turns first (a separate session, when the script
    gives one), then ``args.turns`` timed turns.

    ``await turn(n)`` returns the reply's text as the system handed it over, or a
    coroutine function that reads it (called after the clock stops, for a system whose
    loop returns nothing); either way the text is checked to be whole."""
    if warmup is not None:
        for n in range(WARMUP_TURNS):
            await check_reply(await warmup(n))
    times = []
    for n in range(args.turns):
        began = time.perf_counter()
        text = await turn(n)
        times.append(time.perf_counter() - began)
        await check_reply(text)
    return {
        "workload": "turn",
        "turns": args.turns,
        "median_ms": median_ms(times),
        "mean_ms": statistics.fmean(times) * 1000,
    }


class IncompleteReply(Exception):
    """A system's finished reply is not the fake model's whole text."""


def check_streamed(deltas: list[str]) -> None:
    """The deltas a system's loop handed its caller are the fake model's, one by one."""
    if deltas != DELTAS:
        raise IncompleteReply(f"expected the fake model's 80 deltas, got {len(deltas)}")


async def check_reply(text: Any) -> None:
    if callable(text):
        text = await text()
    if text != REPLY_TEXT:
        raise IncompleteReply(f"expected the fake model's 400 characters, got {text!r:.200}")
