"""A step's workspace: its fingerprint before and after, and the ``patch`` part naming
the files a step (or a call answered later) changed. A mixin of the Processor, as
:class:`~forge.runtime.tool_calls.ToolCalls` is."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from forge import tools

from . import subtask
from .turn import Turn


class Patches:
    """Needs the processor's ``turn``, ``held``, ``_hold`` and ``write``."""

    turn: Turn
    held: list[Any]

    if TYPE_CHECKING:

        async def write(self, *writes: Any, unit: Any = None) -> Any: ...

        def _hold(self, part: dict[str, Any]) -> None: ...

    async def _workspace(self) -> tools.Snapshot:
        """The fingerprint of the session's workspace (``tools.snapshot``), walked on a
        thread; a workspace that does not exist (no tool of the session ever wrote one)
        is the empty fingerprint without a thread: one ``stat``, not two hops a step."""
        workspace = await subtask.workspace(self.turn)  # the same for every step
        if not os.path.isdir(workspace):
            return tools.Snapshot(hash=tools.EMPTY_HASH, files={})
        return await asyncio.to_thread(tools.snapshot, workspace)

    def _hold_patch(self, before: tools.Snapshot | None, after: tools.Snapshot) -> None:
        """A ``patch`` part naming the files that changed from ``before`` to ``after``,
        held for the next write (nothing when none did)."""
        if before is not None and before.hash != after.hash:
            self._hold(
                {
                    "message_id": self.turn.message_id,
                    "type": "patch",
                    "hash": after.hash,
                    "files": tools.changed_files(before, after),
                }
            )

    async def run_with_patch(self, run: Callable[[], Awaitable[None]]) -> None:
        """``run`` (an approved call, resumed outside any step), then the ``patch`` of the
        files it changed, written at once: a step's patch is computed at the step's end,
        which a call answered later is not part of (it changed files, and no patch said
        so)."""
        before = await self._workspace()
        await run()
        self._hold_patch(before, await self._workspace())
        if self.held:
            await self.write()
