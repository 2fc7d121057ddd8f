"""Run the suite's passes side by side: ``make test`` calls this.

The suite runs on two stacks (``tests/conftest.py``): the embedded one (SQLite + the
in-memory layer) and, when ``FORGE_TEST_DATABASE_URL`` and ``FORGE_TEST_REDIS_URL`` are
set, the server one (PostgreSQL + Redis). Much of each pass waits on the daphnes,
browsers, Node clients and clusters it starts, so on a machine of two cores the passes
finish sooner side by side. Modes:

* ``split`` (the default): each stack's suite in two halves, four pytest processes:
  :data:`HALF_A` (the suites that mostly wait on what they start) and the rest. The
  server stack's second half uses a database of its own (the URL's name + ``_b``:
  pytest-django creates ``test_<name>_b``); everything else a pass uses is already its
  own (temporary SQLite files, Redis keys and workspaces named after the process,
  free ports).
* ``parallel``: one process per stack.
* ``sequential``: the embedded pass, then the server pass.

One process prints as it goes (the server stack's second half, or the only one); the
others write to ``var/test-<name>.log``, printed when all have ended. Any pass failing
fails the run, and each one's exit status is printed last.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
HALF_A = ["tests/aisdk", "tests/e2e", "tests/cluster", "tests/servers"]


@dataclass
class Pass:
    name: str
    env: dict[str, str]
    args: list[str]
    log: Path | None = None  # None: prints as it goes
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    took: float = 0.0


def with_database_suffix(url: str, suffix: str) -> str:
    """``url`` naming the database ``<name><suffix>`` (the scheme, host and options kept)."""
    parts = urlsplit(url)
    name = parts.path.lstrip("/") or "forge"
    return urlunsplit(parts._replace(path=f"/{name}{suffix}"))


def passes(mode: str, pytest_args: list[str]) -> list[Pass]:
    embedded = {**os.environ, "FORGE_TEST_STACK": "embedded"}
    server = {**os.environ, "FORGE_TEST_STACK": "server"}
    if mode == "sequential" or not os.environ.get("FORGE_TEST_DATABASE_URL"):
        # Without the server stack configured, its pass says so (and fails under CI).
        return [Pass("embedded", embedded, pytest_args), Pass("server", server, pytest_args)]
    if mode == "parallel":
        return [
            Pass("embedded", embedded, pytest_args, log=ROOT / "var/test-embedded.log"),
            Pass("server", server, pytest_args),
        ]
    rest = [f"--ignore={path}" for path in HALF_A]
    server_b = {
        **server,
        "FORGE_TEST_DATABASE_URL": with_database_suffix(server["FORGE_TEST_DATABASE_URL"], "_b"),
    }
    return [
        Pass("embedded-a", embedded, [*HALF_A, *pytest_args], log=ROOT / "var/test-embedded-a.log"),
        Pass("embedded-b", embedded, [*rest, *pytest_args], log=ROOT / "var/test-embedded-b.log"),
        Pass("server-a", server, [*HALF_A, *pytest_args], log=ROOT / "var/test-server-a.log"),
        Pass("server-b", server_b, [*rest, *pytest_args]),
    ]


def start(one: Pass) -> None:
    command = [sys.executable, "-m", "pytest", *one.args]
    one.started = time.monotonic()
    if one.log is None:
        one.process = subprocess.Popen(command, cwd=ROOT, env=one.env)
        return
    with one.log.open("wb") as out:
        one.process = subprocess.Popen(
            command, cwd=ROOT, env=one.env, stdout=out, stderr=subprocess.STDOUT
        )


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "split"
    if mode not in ("split", "parallel", "sequential"):
        print(f"TEST_PASSES must be split, parallel or sequential, not {mode!r}", file=sys.stderr)
        return 2
    (ROOT / "var").mkdir(exist_ok=True)
    todo = passes(mode, argv[1:])
    codes: dict[str, int] = {}
    if all(one.log is None for one in todo):  # one after the other, stopping at a failure
        for one in todo:
            start(one)
            assert one.process is not None
            codes[one.name] = one.process.wait()
            one.took = time.monotonic() - one.started
            if codes[one.name] != 0:
                break
    else:
        logged = ", ".join(str(one.log.relative_to(ROOT)) for one in todo if one.log)
        print(f"{len(todo)} passes side by side; the others' output follows ({logged})")
        for one in todo:
            start(one)
        for one in todo:
            assert one.process is not None
            codes[one.name] = one.process.wait()
            one.took = time.monotonic() - one.started
        for one in todo:
            if one.log is not None:
                print(f"\n== the {one.name} pass ==", flush=True)
                sys.stdout.write(one.log.read_text(errors="replace"))
    print()
    for one in todo:
        status = codes.get(one.name)
        said = "not run" if status is None else f"exit {status} after {one.took:.0f} s"
        print(f"{one.name} pass: {said}")
    return 0 if len(codes) == len(todo) and all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
