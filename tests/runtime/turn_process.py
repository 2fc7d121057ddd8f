"""Run one turn of a session in this process (the kill -9 and cross-process abort
tests start it with :func:`popen`).

    python tests/runtime/turn_process.py SESSION_ID

Settings come from the environment (DATABASE_URL, FORGE_MODEL, FORGE_SCRIPT …).
Registers a ``sleepy`` tool that sleeps for a minute, so the test can kill the
process while a tool runs.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def popen(session_id: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """This script, running the session's turn in a process of its own (its output,
    stderr included, in ``stdout``)."""
    return subprocess.Popen(
        [sys.executable, __file__, session_id],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def main(session_id: str) -> None:
    from forge.runtime import start_turn
    from forge.tools import tool
    from sessions.models import Session

    @tool(name="sleepy", description="sleeps a minute", parameters={"type": "object"})
    async def sleepy(ctx: Any, args: dict[str, Any]) -> str:
        await asyncio.sleep(60)
        return "awake"

    session = await Session.objects.select_related("tenant").aget(pk=session_id)
    started = await start_turn(session=session, text="please look")
    print("started", started.assistant_message_id, flush=True)
    await started.task


if __name__ == "__main__":
    import django

    django.setup()
    asyncio.run(main(sys.argv[1]))
