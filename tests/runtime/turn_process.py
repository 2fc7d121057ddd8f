"""Run one turn of a session in this process (used by the kill -9 test).

    python tests/runtime/turn_process.py SESSION_ID

Settings come from the environment (DATABASE_URL, FORGE_MODEL, FORGE_SCRIPT …).
Registers a ``sleepy`` tool that sleeps for a minute, so the test can kill the
process while a tool runs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


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
