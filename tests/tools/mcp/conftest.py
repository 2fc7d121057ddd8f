"""Fixtures for the MCP client tests: real servers as child processes, always stopped.

* the connections of ``forge.tools.mcp`` are closed after every test;
* ``everything`` is ``@modelcontextprotocol/server-everything`` from the repo's
  ``node_modules`` (``make test`` runs ``npm install``; this installs it when missing).
  Without node the tests skip, except under ``CI=true``, where they fail;
* :func:`children` finds a server process started by the connection manager (a
  child of this process), to stop or kill it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.tools import mcp
from tests.live import free_port

ROOT = Path(__file__).resolve().parents[3]
SERVERS = Path(__file__).resolve().parent / "servers"
EVERYTHING = ROOT / "node_modules" / "@modelcontextprotocol" / "server-everything"
IN_CI = os.environ.get("CI") == "true"
DEADLINE = 60.0  # seconds to wait for any condition


def unavailable(why: str) -> None:
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(autouse=True)
async def closed_connections() -> AsyncIterator[None]:
    yield
    await mcp.close_all()


def misbehaving(*flags: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVERS / "misbehaving.py"), *flags]}


def time_server() -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone=UTC"]}


def children(marker: str) -> list[int]:
    """Pids of this process's live children whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == os.getpid() and state != "Z" and marker in cmdline:
            found.append(int(entry.name))
    return found


async def one_child(marker: str) -> int:
    """The one live child running ``marker`` (waits for it; fails after the deadline)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        pids = children(marker)
        if len(pids) == 1:
            return pids[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected one child running {marker!r}, found {children(marker)}")


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@pytest.fixture(scope="session")
def everything() -> Path:
    """The server-everything entry point (``dist/index.js``), installed if missing."""
    if shutil.which("node") is None:
        unavailable("node is needed for the server-everything tests")
    entry = EVERYTHING / "dist" / "index.js"
    if not entry.exists():
        if shutil.which("npm") is None:
            unavailable("npm is needed to install server-everything")
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not entry.exists():
            unavailable(f"npm install failed: {done.stderr[-2000:]}")
    return entry


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


class HttpServer:
    """server-everything over streamable HTTP on a free port; ``restart`` keeps the port."""

    def __init__(self, entry: Path) -> None:
        self.entry = entry
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["node", str(self.entry), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


@pytest.fixture
def everything_http(everything: Path) -> Iterator[HttpServer]:
    server = HttpServer(everything)
    try:
        server.start()
        yield server
    finally:
        server.kill()


@pytest.fixture
def script(settings: Any, tmp_path: Path) -> Any:
    """Make ``offline/script`` the model and give it these replies."""
    import json

    def use(replies: list[list[dict[str, Any]]]) -> Path:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(replies))
        settings.FORGE_MODEL = "offline/script"
        settings.FORGE_SCRIPT = str(path)
        return path

    return use


def text_reply(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish-step", "finish_reason": "stop", "usage": {"input": 10, "output": 2}},
    ]


def tool_reply(tool: str, arguments: str, call_id: str = "call_1") -> list[dict[str, Any]]:
    return [
        {"type": "tool-input-start", "call_id": call_id, "tool": tool},
        {"type": "tool-call", "call_id": call_id, "tool": tool, "input": arguments},
        {"type": "finish-step", "finish_reason": "tool-calls", "usage": {"input": 5, "output": 3}},
    ]


async def use_servers(servers: dict[str, Any]) -> None:
    """Give the default agent (``build``, from the ``agents`` fixture) these servers."""
    from channels.db import database_sync_to_async

    from forge.models import Agent

    await database_sync_to_async(
        lambda: Agent.objects.filter(name="build").update(mcp_servers=servers)
    )()


async def reply_of(session: Any) -> dict[str, Any]:
    """The session's last assistant message ``{info, parts}``."""
    from channels.db import database_sync_to_async

    from sessions import selectors

    items = await database_sync_to_async(
        lambda: list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    )()
    return [item for item in items if item["info"]["role"] == "assistant"][-1]


def tool_parts(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in reply["parts"] if p["type"] == "tool"]


async def run_turn(session: Any, text: str) -> None:
    from forge.runtime import start_turn

    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, timeout=DEADLINE * 2)


async def wait_running(session: Any, tool: str) -> None:
    """Wait until the session's tool part for ``tool`` is ``running``."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        reply = await reply_of(session)
        if any(p["tool"] == tool and p["state"]["status"] == "running" for p in tool_parts(reply)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{tool} never ran")


async def stored_file(part: dict[str, Any]) -> bytes:
    """The bytes stored for a ``file`` part (its url is the session's files route)."""
    from channels.db import database_sync_to_async
    from django.core.files.storage import default_storage

    from forge.tools import session_files
    from sessions.models import Session

    session = await database_sync_to_async(Session.objects.get)(pk=part["session_id"])
    assert part["url"] == session_files.file_url(session.pk, part["id"])
    path = session_files.stored_file(
        tenant_id=session.tenant_id, session_id=session.pk, part_id=part["id"]
    )
    assert path is not None
    with default_storage.open(path) as handle:
        return bytes(handle.read())


async def logged_context(session: Any) -> dict[str, Any]:
    """The context blocks in force, folded from the session's ``context.updated`` events."""
    from channels.db import database_sync_to_async

    from sessions import selectors
    from sessions.projector import fold_context

    return await database_sync_to_async(
        lambda: fold_context(selectors.context_updates(tenant=session.tenant, session=session))
    )()


async def logged_tools(session: Any) -> list[str]:
    """The names in the logged ``tools`` block (what the model is sent)."""
    blocks = await logged_context(session)
    return [t["name"] for t in blocks["tools:agent"]["tools"]]
