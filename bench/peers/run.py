"""Forge beside its peers: the session store and a whole streamed turn, side by side.

Runs the same two workloads (``peers_common``) on Forge and on each peer, every system
in its own virtual environment, each run a subprocess printing JSON, interleaved round
by round (the order rotating) so that the machine's noise falls on all alike:

* store — N = 100, 400, 1,600 turns (a user message and a ~400-character reply each):
  append one turn (median ms over turns 1..N), load the next turn's model input at N
  (median ms), bytes on disk at N (database file + WAL after a checkpoint);
  and the append's mean and 99th percentile at the largest N (the turns that pay for
  periodic work, which the median hides);
* turn — 100 whole turns through the system's own agent loop, the model an in-process
  fake streaming 80 deltas with no delay: median ms per turn.

Installs nothing. ``--venvs DIR`` holds one virtual environment per peer:
``DIR/openai-agents``, ``DIR/langgraph``, ``DIR/adk`` (the README's benchmark section
has the ``pip install`` lines); a missing one is skipped with a note. Forge runs with
the Python running this script (the project's .venv).

Prints one table: a row per system (median over the rounds), then a row per peer with
the ratios Forge / peer for every column (below 1.00x: Forge is faster or smaller).

    .venv/bin/python bench/peers/run.py --venvs /work/peer-venvs [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peers_common as common

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/table.py

from table import print_table  # noqa: E402


@dataclass(frozen=True)
class Peer:
    key: str  # the folder of its virtual environment under --venvs ("" for Forge)
    script: str
    label: str  # its name in notes


PEERS = [
    Peer("", "peer_forge.py", "Forge"),
    Peer("openai-agents", "peer_openai_agents.py", "OpenAI Agents SDK"),
    Peer("langgraph", "peer_langgraph.py", "LangGraph"),
    Peer("adk", "peer_adk.py", "Google ADK"),
]


@dataclass(frozen=True)
class System:
    peer: Peer
    python: str
    variant: str
    name: str


def child(system_python: str, script: str, argv: list[str]) -> dict[str, Any]:
    """Run one peer script; its last stdout line is its JSON result."""
    done = subprocess.run(
        [system_python, str(HERE / script), *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=HERE,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def discover(venvs: Path | None, only: set[str] | None) -> tuple[list[System], dict, list[str]]:
    """The systems to measure (a script may hold several), their versions, and notes."""
    systems, versions, notes = [], {}, []
    for peer in PEERS:
        if only is not None and (peer.key or "forge") not in only:
            continue
        if peer.key:
            python = venvs / peer.key / "bin" / "python" if venvs else None
            if python is None or not python.exists():
                notes.append(f"{peer.label} skipped: no virtual environment at {python}")
                continue
            python_path = str(python)
        else:
            python_path = sys.executable
        try:
            described = child(python_path, peer.script, ["--workload", "describe"])
        except RuntimeError as exc:
            notes.append(f"{peer.label} skipped: {exc}")
            continue
        versions[peer.label] = described["versions"]
        for variant, name in described["variants"].items():
            systems.append(System(peer, python_path, variant, name))
    return systems, versions, notes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--venvs", type=Path, help="a folder holding one venv per peer")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default=",".join(map(str, common.SIZES)))
    parser.add_argument("--turns", type=int, default=common.TURNS)
    parser.add_argument("--loads", type=int, default=common.LOADS)
    parser.add_argument(
        "--langgraph-max-size",
        type=int,
        default=400,
        help="LangGraph's store stops here: every checkpoint repeats the whole history",
    )
    parser.add_argument("--only", help="comma-separated: forge,openai-agents,langgraph,adk")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small N, 1 round")
    parser.add_argument("--ranges", action="store_true", help="cells show min-max over rounds")
    parser.add_argument("--json", type=Path, help="also write every run's raw result here")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.turns, args.loads = 1, common.QUICK_TURNS, 2
        args.sizes = ",".join(map(str, common.QUICK_SIZES))
    sizes = sorted(int(s) for s in args.sizes.split(","))
    only = set(args.only.split(",")) if args.only else None

    systems, versions, notes = discover(args.venvs, only)
    if not systems:
        sys.exit("nothing to measure:\n" + "\n".join(notes))
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s.name: {"store": [], "turn": []} for s in systems
    }
    began = time.perf_counter()
    for round_ in range(args.rounds):
        order = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
        for workload in ("store", "turn"):
            for system in order:
                own_sizes = sizes
                if system.peer.key == "langgraph":
                    own_sizes = [n for n in sizes if n <= args.langgraph_max_size] or sizes[:1]
                argv = [
                    "--workload", workload,
                    "--variant", system.variant,
                    "--sizes", ",".join(map(str, own_sizes)),
                    "--loads", str(args.loads),
                    "--turns", str(args.turns),
                ]  # fmt: skip
                print(
                    f"[{time.perf_counter() - began:6.0f}s] round {round_ + 1}/{args.rounds} "
                    f"{workload} {system.name}",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    runs[system.name][workload].append(
                        child(system.python, system.peer.script, argv)
                    )
                except RuntimeError as exc:
                    notes.append(f"{system.name} {workload}, round {round_ + 1}: {exc}")
    if args.json:
        args.json.write_text(json.dumps({"versions": versions, "runs": runs}, indent=1))
    report(systems, runs, versions, notes, sizes, args)


def column_values(runs: dict[str, list[dict[str, Any]]], sizes: list[int]) -> list[list[float]]:
    """Per column, the value of every round (empty: not measured)."""
    columns: list[list[float]] = []
    for field in ("append_ms", "load_ms", "bytes"):
        for size in sizes:
            columns.append(
                [r["at"][str(size)][field] for r in runs["store"] if str(size) in r["at"]]
            )
    columns.append([r["median_ms"] for r in runs["turn"]])
    # The append's mean and p99 at the largest N: what periodic work (Forge's context
    # snapshot, every FORGE_CONTEXT_SNAPSHOT_EVENTS events) costs, which the median hides.
    last = str(sizes[-1])
    for field in ("append_mean_ms", "append_p99_ms"):
        columns.append(
            [r["at"][last][field] for r in runs["store"] if field in r["at"].get(last, {})]
        )
    return columns


def report(
    systems: list[System],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    versions: dict[str, dict[str, str]],
    notes: list[str],
    sizes: list[int],
    args: Any,
) -> None:
    header = ["system"]
    header += [f"append ms N={n:,}" for n in sizes]
    header += [f"load ms N={n:,}" for n in sizes]
    header += [f"MB N={n:,}" for n in sizes]
    header += [f"turn ms ({args.turns} turns)"]
    header += [f"append mean ms N={sizes[-1]:,}", f"append p99 ms N={sizes[-1]:,}"]
    scale = [1.0] * (2 * len(sizes)) + [1e-6] * len(sizes) + [1.0, 1.0, 1.0]

    def median(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    def cell(values: list[float], factor: float) -> str:
        if not values:
            return "—"
        text = number(statistics.median(values) * factor)
        if args.ranges and len(values) > 1:
            text += f" ({number(min(values) * factor)}-{number(max(values) * factor)})"
        return text

    table, medians = [], {}
    for system in systems:
        columns = column_values(runs[system.name], sizes)
        medians[system.name] = [median(c) for c in columns]
        table.append([system.name, *(cell(c, f) for c, f in zip(columns, scale, strict=True))])
    forge = medians.get("Forge")
    if forge is not None:
        for system in systems:
            if system.name == "Forge":
                continue
            ratios = [
                f"{f / p:.2f}x" if f is not None and p else "—"
                for f, p in zip(forge, medians[system.name], strict=True)
            ]
            table.append([f"Forge / {system.name}", *ratios])

    print(
        f"Forge and its peers, SQLite, one sitting, {args.rounds} interleaved round(s); "
        f"store: N turns of a user message + a {len(common.REPLY_TEXT)}-character reply; "
        f"turn: a fake model streaming {len(common.DELTAS)} deltas, no delay; "
        "cells: median over the rounds (store: append = median over turns 1..N, "
        f"load = median of {args.loads}; turn = median over the turns; the last two "
        "columns: the append's mean and 99th percentile over turns 1..N at the largest N)"
    )
    print(
        f"python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.machine()}, "
        + "; ".join(
            f"{label}: " + ", ".join(f"{k} {v}" for k, v in found.items())
            for label, found in versions.items()
        )
    )
    print_table(header, table)
    if any(s.peer.key == "langgraph" for s in systems) and sizes[-1] > args.langgraph_max_size:
        print(
            f"LangGraph's store stops at {args.langgraph_max_size} turns "
            "(--langgraph-max-size): MessagesState keeps the whole history in every "
            "checkpoint, so its bytes grow quadratically."
        )
    for note in notes:
        print(f"note: {note}")


def number(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


if __name__ == "__main__":
    main()
