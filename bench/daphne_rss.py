"""A daphne's memory over many turns: RSS stays flat once the context cache's byte cap
is reached (issue 20: "a daphne's RSS flat within the cache's byte cap over 10,000
turns").

One daphne on PostgreSQL + Redis (``--sqlite``: SQLite + the in-memory layer) per
byte cap (``--caps``, ``FORGE_CONTEXT_CACHE_BYTES``), the session cap raised above
``--sessions`` so that only bytes evict. ``--turns`` turns through
``POST /api/sessions/{id}/messages/?wait=1``, round robin over ``--sessions`` sessions,
``--clients`` at a time (each its own sessions), the model ``bench/clock`` asked for
``--deltas`` deltas at no delay (a reply of ~18 characters a delta). Prints a row every
tenth of the turns: the daphne's RSS (``VmRSS``), its growth since the first row's
start (after the sessions were made and warmed), the context cache's estimate
(``cache.nbytes``) and entries and evictions as the daphne last reported them, and
turns per second.

The daphne reports them through this module, loaded into it as a plugin
(``FORGE_PLUGINS``) with ``FORGE_BENCH_RSS_PROBE`` naming a file: a thread of its
writes the cache's numbers there every 0.2 s (:func:`probe`). ``--trace`` also
starts the daphne with ``tracemalloc`` on (``PYTHONTRACEMALLOC``, slow) and, after
the last turn, prints where the traced memory grew since the warm-up (by line), what
``cache.clear()`` frees against the estimate, and what grew outside the cache. After
each cap's last turn it prints where the daphne's memory sits (RSS, glibc malloc's
heap, pymalloc's arenas) after the warm-up, after the turns and after a
``cache.clear()``.

    python bench/daphne_rss.py [--turns 10000] [--sessions 500] [--clients 4]
        [--caps 4194304,67108864] [--deltas 80] [--sqlite] [--trace]

Timings are not the point; nothing here is asserted by tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from server_path import ROOT, database_url, drop_database, manage, server_env
from serving import free_port, server_arguments, start_daphne, static_root, wait_until_up
from table import print_table  # bench/ comes first on sys.path: python bench/<name>.py

# A database of its own (``server_path.py``'s would be dropped by a run of that bench).
BENCH_DB = f"forge_bench_daphne_rss_{os.getpid()}"


PROBE = "FORGE_BENCH_RSS_PROBE"
TOP = 25  # lines of a --trace report


def probe(path: Path) -> None:
    """In the daphne (this module imported as a plugin): a thread writing the context
    cache's estimate, entries, messages and evictions to ``path`` every 0.2 s, and
    answering ``--trace``'s requests (``path``.cmd: ``mark``, then ``report``)."""
    import threading
    import tracemalloc

    from forge.context.incremental import cache

    def loop() -> None:
        command = path.with_suffix(".cmd")
        mark: Any = None
        marked = 0
        while True:
            if command.exists():
                asked = command.read_text().strip()
                command.unlink()
                if asked == "mark":
                    mark = traced_snapshot()
                    if mark is not None:
                        tracemalloc.reset_peak()  # the report's peak is the turns'
                        marked = tracemalloc.get_traced_memory()[0]
                    write(path.with_suffix(".marked"), json.dumps(allocators()))
                elif asked == "report":
                    peak = tracemalloc.get_traced_memory()[1] - marked  # before any snapshot
                    report = trace_report(cache, mark)
                    report["peak"] = peak
                    write(path.with_suffix(".report"), json.dumps(report))
            write(
                path,
                json.dumps(
                    {
                        "estimate": cache.nbytes,
                        "entries": len(cache),
                        "messages": cache._messages,
                        "evicted": cache.stats["evicted"],
                    }
                ),
            )
            time.sleep(0.2)

    threading.Thread(target=loop, name="daphne-rss-probe", daemon=True).start()


def write(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def traced_snapshot() -> Any:
    """A ``tracemalloc`` snapshot after a collection (None when it is not tracing)."""
    import gc
    import tracemalloc

    gc.collect()
    return tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None


def top_lines(after: Any, before: Any) -> list[list[Any]]:
    """The ``TOP`` lines (file:line) whose traced memory grew most from ``before``."""
    root = str(ROOT) + "/"
    rows = []
    for stat in after.compare_to(before, "lineno")[:TOP]:
        frame = stat.traceback[0]
        rows.append([f"{frame.filename.replace(root, '')}:{frame.lineno}", stat.size_diff,
                     stat.count_diff])  # fmt: skip
    return rows


def allocators() -> dict[str, int]:
    """Where this process's memory sits: RSS; glibc malloc's heap (``mallinfo2``: all
    arenas' bytes, those in use, free, and mmapped chunks); pymalloc's arenas and the
    bytes in their allocated blocks (``sys._debugmallocstats``, read from its stderr)."""
    import ctypes
    import re
    import sys

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in [
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            ]
        ]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as out:
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        stats = out.read()

    def number(label: str) -> int:
        found = re.search(re.escape(label) + r"[^=]*=\s*([\d,]+)", stats)
        return int(found.group(1).replace(",", "")) if found else -1

    return {
        "rss": int(rss_mib(os.getpid()) * 2**20),
        "malloc heap": info.arena,
        "malloc used": info.uordblks,
        "malloc free": info.fordblks,
        "malloc mmapped": info.hblkhd,
        "pymalloc arenas": number("# arenas allocated current") * 2**20,
        "pymalloc allocated": number("# bytes in allocated blocks"),
    }


def trace_report(cache: Any, mark: Any) -> dict[str, Any]:
    """After the last turn: where the memory sits (:func:`allocators`) before and after
    ``cache.clear()``; with ``tracemalloc`` on (``mark``: its snapshot after the
    warm-up), the growth since by line, what the clear freed against the estimate, and
    the growth left (outside the cache)."""
    import gc
    import tracemalloc

    gc.collect()
    report: dict[str, Any] = {"estimate": cache.nbytes, "entries": len(cache)}
    report["before"] = allocators()
    if mark is not None:
        after = traced_snapshot()
        report["grown"] = sum(s.size_diff for s in after.compare_to(mark, "lineno"))
        report["top"] = top_lines(after, mark)
        held = tracemalloc.get_traced_memory()[0]
    cache.clear()
    gc.collect()
    report["after"] = allocators()
    if mark is not None:
        report["freed"] = held - tracemalloc.get_traced_memory()[0]
        rest = traced_snapshot()
        report["left"] = sum(s.size_diff for s in rest.compare_to(mark, "lineno"))
        report["left_top"] = top_lines(rest, mark)
    return report


async def ask(path: Path, command: str, answer: Path) -> str:
    """Ask the daphne's probe ``command`` and wait for its ``answer`` file."""
    answer.unlink(missing_ok=True)
    write(path.with_suffix(".cmd"), command)
    for _ in range(6000):
        if answer.exists():
            return answer.read_text()
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the daphne's probe did not answer {command!r}")


def cache_numbers(path: Path) -> dict[str, int]:
    """What the daphne's probe last wrote (``{}`` before its first write)."""
    try:
        return dict(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return {}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def run(
    args: argparse.Namespace, base: str, pid: int, token: str, numbers: Path
) -> list[list[str]]:
    headers = {"Authorization": f"Token {token}"}
    text = f"{args.deltas} 1000000"
    limits = httpx.Limits(max_connections=args.clients)
    async with httpx.AsyncClient(
        base_url=base, headers=headers, timeout=120, limits=limits
    ) as http:
        ids: list[str] = []
        for n in range(args.sessions):
            response = await http.post("/api/sessions/", json={"title": f"rss {n}"})
            response.raise_for_status()
            ids.append(response.json()["id"])

        async def turn(session_id: str) -> None:
            response = await http.post(
                f"/api/sessions/{session_id}/messages/?wait=1", json={"text": text}
            )
            if response.status_code != 200:
                raise RuntimeError(f"{response.status_code} {response.text[:300]}")

        for session_id in ids[: args.clients * 2]:  # warm: imports, pools
            await turn(session_id)
        marked = json.loads(await ask(numbers, "mark", numbers.with_suffix(".marked")))
        start_rss = rss_mib(pid)
        rows = []
        done = 0
        step = max(args.turns // 10, 1)
        queue: asyncio.Queue[str] = asyncio.Queue()
        for n in range(args.turns):
            queue.put_nowait(ids[n % len(ids)])
        started = time.monotonic()
        lock = asyncio.Lock()

        async def client() -> None:
            nonlocal done
            while not queue.empty():
                session_id = queue.get_nowait()
                await turn(session_id)
                async with lock:
                    done += 1
                    if done % step == 0:
                        rss = rss_mib(pid)
                        cached = cache_numbers(numbers)
                        rows.append(
                            [
                                f"{args.cap / 2**20:g}",
                                f"{done:,}",
                                f"{rss:.1f}",
                                f"{rss - start_rss:.1f}",
                                f"{cached.get('estimate', 0) / 2**20:.2f}",
                                f"{cached.get('entries', 0):,}",
                                f"{cached.get('evicted', 0):,}",
                                f"{done / (time.monotonic() - started):.0f}",
                            ]
                        )

        await asyncio.gather(*(client() for _ in range(args.clients)))
        report = json.loads(await ask(numbers, "report", numbers.with_suffix(".report")))
        print_report(args, marked, report)
    return rows


def print_report(args: argparse.Namespace, marked: dict[str, int], report: dict[str, Any]) -> None:
    """Where the daphne's memory sat after the warm-up, after the last turn, and after
    ``cache.clear()`` (MiB), and with ``--trace`` where the traced memory grew."""
    mib = 2**20
    print(
        f"cap {args.cap / mib:g} MiB, {args.turns:,} turns: the cache's estimate "
        f"{report['estimate'] / mib:.2f} MiB ({report['entries']} entries)"
    )
    if "grown" in report:
        print("(allocators' numbers under tracemalloc are its own as much as the cache's)")
    print_table(
        ["MiB", "after warm-up", "after the turns", "after cache.clear()"],
        [
            [key, *(f"{at[key] / mib:.1f}" for at in (marked, report["before"], report["after"]))]
            for key in marked
        ],
    )
    if "grown" not in report:
        return
    print(
        f"traced memory grew {report['grown'] / mib:.2f} MiB since the warm-up (its peak: "
        f"{report['peak'] / mib:.2f} MiB above it); "
        f"cache.clear() freed {report['freed'] / mib:.2f} MiB (freed / estimate "
        f"{report['freed'] / max(report['estimate'], 1):.2f}); growth left outside the "
        f"cache {report['left'] / mib:.2f} MiB"
    )
    for title, key in (("grown, by line", "top"), ("left after cache.clear()", "left_top")):
        print(title)
        print_table(
            ["where", "KiB", "blocks"],
            [[where, f"{size / 1024:,.1f}", f"{count:,}"] for where, size, count in report[key]],
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--caps", default=f"{4 * 2**20},{64 * 2**20}")
    parser.add_argument("--deltas", type=int, default=80)
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--app-dir", type=Path, default=ROOT)
    server_arguments(parser)
    args = parser.parse_args()
    rows: list[list[str]] = []
    for cap in [int(c) for c in args.caps.split(",") if c]:
        args.cap = cap
        scratch = Path(tempfile.mkdtemp(prefix="forge-daphne-rss-"))
        env = static_root(server_env(args, database_url(args, scratch, BENCH_DB), scratch))
        env["FORGE_CONTEXT_CACHE_BYTES"] = str(cap)
        env["FORGE_CONTEXT_CACHE_SIZE"] = str(args.sessions * 2)
        env["FORGE_CONTEXT_CACHE_MESSAGES"] = str(10**9)
        manage(args, env, "migrate", "--noinput", "--verbosity", "0")
        manage(args, env, "collectstatic", "--noinput", "--verbosity", "0")
        token = manage(args, env, "create_user", "bench", "--tenant", "bench", "--token")
        token = token.strip().splitlines()[-1]
        port = free_port()
        log = scratch / "daphne.log"
        numbers = scratch / "cache.json"  # the daphne's probe, not the commands'
        daphne_env = {**env, "FORGE_PLUGINS": f"{env['FORGE_PLUGINS']},daphne_rss"}
        daphne_env[PROBE] = str(numbers)
        if args.trace:
            daphne_env["PYTHONTRACEMALLOC"] = "1"
        server = start_daphne(args.app_dir, daphne_env, port, log)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(base, server, log)
            rows += asyncio.run(run(args, base, server.pid, token, numbers))
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
    drop_database(args, BENCH_DB)
    engine = "SQLite + in-memory layer" if args.sqlite else "PostgreSQL + Redis"
    print(
        f"a daphne's RSS over {args.turns:,} turns through HTTP ?wait=1, {args.sessions} "
        f"sessions, {args.clients} clients, {args.deltas} deltas a reply; {engine}"
    )
    print_table(
        ["cap MiB", "turns", "RSS MiB", "RSS growth MiB", "estimate MiB", "entries", "evicted",
         "turns/s"],
        rows,
    )  # fmt: skip


if __name__ == "__main__":
    main()
elif os.environ.get(PROBE):  # imported by the daphne as a plugin
    probe(Path(os.environ[PROBE]))
