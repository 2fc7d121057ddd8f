"""The whole turn in instructions: what a turn costs, whatever else the machine runs.

Wall-clock medians of ``run.py`` move with the machine's load (two cores shared
with test suites moved them by 2x in issue 19's sittings). Instructions do not:
valgrind's callgrind counts every instruction the process runs (``Ir``). Each tree
(a checkout of Forge: this one, or a worktree of an older commit) runs the peers'
turn workload (``peer_forge.DeltasProvider``: one text block of 80 deltas, no
delay, through ``start_turn``) twice under callgrind, for ``--short`` and for
``--long`` turns after 5 warm-up turns; the difference divided by ``long - short``
is one turn's instructions, with Django's set-up, the imports and the migrations
subtracted out.

So that the slower process under valgrind takes the same paths as a fast one: the
delta window is longer than any turn (``FORGE_DELTA_WINDOW_MS``: one flush per
block end, as with a fast model), the lease longer than the run (no renewal), and
``PYTHONHASHSEED=0``. Two runs of the same tree agree to 0.1 %.

Needs ``valgrind`` (Debian's package). Slow: about 3 minutes per tree.

    python bench/peers/instructions.py [--trees /work/before,.] [--short 20] [--long 120]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/table.py

from table import print_table  # noqa: E402

ENV = {"PYTHONHASHSEED": "0", "FORGE_DELTA_WINDOW_MS": "600000", "FORGE_LEASE_SECONDS": "3600"}
WARMUP = 5


def child(tree: Path, turns: int) -> None:
    """Run in the measured process: ``turns`` whole turns of the tree's Forge."""
    sys.path.insert(0, str(tree / "bench" / "peers"))
    import peer_forge
    import peers_common as common

    peer_forge.ROOT = tree
    peer_forge.setup()

    async def main() -> None:
        from channels.db import database_sync_to_async

        from forge import providers
        from forge.runtime import start_turn

        providers.register("bench", lambda model: peer_forge.DeltasProvider())
        session = await database_sync_to_async(peer_forge.new_session)("instructions")
        for _ in range(WARMUP + turns):
            started = await start_turn(session=session, text=common.USER_TEXT)
            await started.task

    asyncio.run(main())


def instructions(tree: Path, turns: int) -> int:
    """The ``Ir`` total of one child process under callgrind."""
    with tempfile.TemporaryDirectory() as directory:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={directory}/out",
                sys.executable,
                __file__,
                "--child",
                str(tree),
                str(turns),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **ENV},
            check=False,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{tree} failed under valgrind:\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", default=".", help="comma-separated checkouts of Forge")
    parser.add_argument("--short", type=int, default=20)
    parser.add_argument("--long", type=int, default=120)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]).resolve(), int(args.child[1]))
        return
    if args.long <= args.short:
        parser.error("--long must be more turns than --short")
    rows: list[list[str]] = []
    first = 0.0
    for name in args.trees.split(","):
        tree = Path(name).resolve()
        short, long = instructions(tree, args.short), instructions(tree, args.long)
        per_turn = (long - short) / (args.long - args.short)
        first = first or per_turn
        rows.append([str(tree), f"{per_turn / 1e6:.2f}", f"{(per_turn / first - 1) * 100:+.1f} %"])
    print(f"whole turn (80 deltas, no delay), Ir({args.long}) - Ir({args.short}) turns, callgrind")
    print_table(["tree", "M instructions / turn", "against the first"], rows)


if __name__ == "__main__":
    main()
