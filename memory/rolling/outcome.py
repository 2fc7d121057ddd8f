"""What a rolling did to one core: :class:`RollOutcome` and its :data:`Status`.

An outcome is plain data; ``error`` is set only for ``failed``, and ``result`` (what
the AfterRolling consumers receive) only for a ``rolled`` core whose increment was
appended to its unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..results import RollingResult, Trigger

Status = Literal["rolled", "would_roll", "not_due", "busy", "changed", "missing", "failed"]


@dataclass
class RollOutcome:
    """What happened to one core. ``error`` is ``{code, message}`` when it failed."""

    core_id: str
    status: Status
    trigger: Trigger | None = None
    messages: int = 0  # the increment: messages appended to the unit
    trimmed: int = 0  # messages removed from the window
    unit_id: str | None = None
    slice_id: str | None = None
    memory_session_id: str | None = None  # the core's, after rolling
    error: dict[str, str] | None = None
    result: RollingResult | None = field(default=None, repr=False)

    def wire(self) -> dict[str, Any]:
        return {
            "core": self.core_id,
            "status": self.status,
            "trigger": self.trigger,
            "messages": self.messages,
            "trimmed": self.trimmed,
            "unit": self.unit_id,
            "slice": self.slice_id,
            "memory_session_id": self.memory_session_id,
            "error": self.error,
        }
