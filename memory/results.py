"""What one rolling did, as its AfterRolling consumers receive it: a leaf module.

``RollingResult`` is plain data, built by ``memory.rolling`` from what the
rolling's transaction wrote. It imports nothing of the store and never reads
the database, so any module (``search``, consumers in other apps) can import
it without pulling in the selectors. A consumer that wants the core's
``dialog_history`` block as of now asks ``memory.selectors.dialog_history_block``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Trigger = Literal["threshold", "idle", "manual"]


@dataclass(frozen=True)
class RollingResult:
    """What one rolling of a core did. ``slice`` and ``messages`` are wire shapes."""

    tenant_id: int
    core_id: str
    user_id: int
    agent: str
    trigger: Trigger
    unit_id: str
    memory_session_id: str  # the unit's memory session
    next_memory_session_id: str  # the core's after rolling (new after an idle rolling)
    slice: dict[str, Any]
    messages: tuple[dict[str, Any], ...]  # the increment appended to the unit, raw
    trimmed: int  # messages removed from the dialogue window

    @property
    def slice_id(self) -> str:
        return str(self.slice["id"])
