"""Every Forge metric, declared once (names start with ``forge_``), and the small
functions the code calls to move them.

Several processes: each daphne counts its own. Either scrape every process
(per-process scraping, the default), or set ``PROMETHEUS_MULTIPROC_DIR`` to a
directory shared by the processes of one machine (emptied before they start), and
any process's ``/metrics`` serves the sum of all of them
(``prometheus_client``'s multiprocess mode; gauges sum over live processes: a process
that exits leaves the sum, and one killed with SIGKILL is taken out at the next scrape,
:func:`forget_dead_processes`).

Labels are bounded: agent and model names come from the operator's configuration,
tools from the registry and the MCP servers the operator named, kinds and faces from
fixed lists. Nothing here may raise into the caller: a metric is never a reason for
a turn to fail.
"""

from __future__ import annotations

import atexit
import os
import re

from prometheus_client import Counter, Gauge, Histogram, multiprocess

# Latency buckets (seconds) for a first delta and a whole reply: from a cached local
# model to a slow remote one.
_REPLY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0)
_APPEND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
_ROLLING_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)

TURNS_STARTED = Counter(
    "forge_turns_started", "Turns started (a reply began), by agent and model.", ["agent", "model"]
)
TURNS_FINISHED = Counter(
    "forge_turns_finished", "Turns whose reply finished without error.", ["agent", "model"]
)
TURNS_FAILED = Counter(
    "forge_turns_failed", "Turns whose reply ended with an error.", ["agent", "model"]
)
TURNS_ABORTED = Counter(
    "forge_turns_aborted", "Turns aborted by a client or an operator.", ["agent", "model"]
)
STREAMS_OPEN = Gauge(
    "forge_streams_open",
    "Client streams open now (socket, SSE, AI SDK), by face.",
    ["face"],
    multiprocess_mode="livesum",
)
FRAMES_SENT = Counter("forge_frames_sent", "Frames sent to clients, by face.", ["face"])
SLOW_CLIENTS_CUT = Counter(
    "forge_slow_clients_cut",
    "Clients cut because their write buffer stayed full (they resume from their last seq), "
    "by connection kind (http: SSE and AI SDK streams; socket).",
    ["face"],
)
DELTAS_SENT = Counter("forge_deltas_sent", "Delta frames sent to clients, by face.", ["face"])
FIRST_DELTA_SECONDS = Histogram(
    "forge_first_delta_seconds",
    "From a turn's start to its first streamed delta.",
    ["agent", "model"],
    buckets=_REPLY_BUCKETS,
)
REPLY_SECONDS = Histogram(
    "forge_reply_seconds",
    "From a turn's start to its reply's end.",
    ["agent", "model"],
    buckets=_REPLY_BUCKETS,
)
LEASE_TAKEOVERS = Counter(
    "forge_lease_takeovers", "Session leases taken over from a process that stopped renewing."
)
TURNS_RECOVERED = Counter(
    "forge_turns_recovered", "Open replies finalized or resumed by recovery or the janitor."
)
PROVIDER_ERRORS = Counter(
    "forge_provider_errors", "Model calls that ended in an error, by kind.", ["provider", "kind"]
)
PROVIDER_RETRIES = Counter(
    "forge_provider_retries", "Model calls retried, by the failure's kind.", ["provider", "kind"]
)
TOOL_CALLS = Counter("forge_tool_calls", "Tool calls run, by tool.", ["tool"])
TOOL_ERRORS = Counter("forge_tool_errors", "Tool calls that ended in an error, by tool.", ["tool"])
ROLLING_RUNS = Counter("forge_rolling_runs", "Dialog rollings done (a slice written).")
ROLLING_FAILURES = Counter("forge_rolling_failures", "Dialog rollings that failed.")
ROLLING_SECONDS = Histogram(
    "forge_rolling_seconds",
    "How long one rolling sweep (roll_dialogs) or one core's rolling took.",
    buckets=_ROLLING_BUCKETS,
)
APPEND_SECONDS = Histogram(
    "forge_append_seconds",
    "How long one append to a session's log took (one transaction, one or more events).",
    buckets=_APPEND_BUCKETS,
)

FACES = ("socket", "sse", "aisdk")

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    # A process that exits takes its live gauges (streams open) out of the sum; one
    # killed with SIGKILL cannot, which is why the directory is emptied at each start.
    atexit.register(multiprocess.mark_process_dead, os.getpid())


_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db")


def forget_dead_processes(directory: str) -> list[int]:
    """Take the live gauges of the processes that died without exiting (SIGKILL, OOM)
    out of the multiprocess sum; the pids forgotten. The directory is one machine's, so
    its pids are this machine's: a pid that no process has is dead (a pid reused since
    would keep a dead process's streams counted until the next start, as before)."""
    dead: list[int] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return dead
    for name in names:
        found = _LIVE_GAUGE_FILE.fullmatch(name)
        if found is None:
            continue
        pid = int(found.group(1))
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, directory)
            dead.append(pid)
        except OSError:
            continue  # alive, another user's
    return dead


def model_label(model: object) -> str:
    """``provider/model`` from a message's ``model`` (a dict) or a model string."""
    if isinstance(model, dict):
        return f"{model.get('provider', '')}/{model.get('model', '')}"
    return str(model or "")


def tool_called(tool: str, *, failed: bool) -> None:
    TOOL_CALLS.labels(tool=tool).inc()
    if failed:
        TOOL_ERRORS.labels(tool=tool).inc()


def stream_opened(face: str) -> None:
    STREAMS_OPEN.labels(face=face).inc()


def stream_closed(face: str) -> None:
    STREAMS_OPEN.labels(face=face).dec()


def frames_sent(face: str, *, frames: int, deltas: int = 0) -> None:
    FRAMES_SENT.labels(face=face).inc(frames)
    if deltas:
        DELTAS_SENT.labels(face=face).inc(deltas)


def slow_client_cut(face: str) -> None:
    SLOW_CLIENTS_CUT.labels(face=face).inc()


def rollings_done(sender: object, outcomes: list[object], seconds: float, **kwargs: object) -> None:
    """``memory.signals.rollings_done``: a sweep's (or one core's) rollings and failures,
    and how long it took."""
    statuses = [getattr(outcome, "status", None) for outcome in outcomes]
    ROLLING_RUNS.inc(statuses.count("rolled"))
    ROLLING_FAILURES.inc(statuses.count("failed"))
    ROLLING_SECONDS.observe(seconds)
