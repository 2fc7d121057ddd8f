"""The text so far of every part still streaming, for ``part.snapshot`` frames.

Deltas never reach the log; this buffer is what a client that (re)connects in
the middle of a reply is given to catch up, and what finalization writes if a
turn is aborted. This implementation lives in the process that runs the turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class Streaming:
    session_id: str
    message_id: str
    part_id: str
    field: str
    chunks: list[str] = dataclasses.field(default_factory=list)
    length: int = 0

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""


class InflightBuffer:
    def __init__(self) -> None:
        self._parts: dict[str, Streaming] = {}

    def open(self, *, session_id: str, message_id: str, part_id: str, field: str = "text") -> None:
        self._parts[part_id] = Streaming(session_id, message_id, part_id, field)

    def append(self, part_id: str, delta: str) -> int:
        """Add a delta; return the offset it starts at."""
        part = self._parts[part_id]
        offset = part.length
        part.chunks.append(delta)
        part.length += len(delta)
        return offset

    def text(self, part_id: str) -> str:
        part = self._parts.get(part_id)
        return part.text if part else ""

    def close(self, part_id: str) -> None:
        self._parts.pop(part_id, None)

    def snapshot(self, session_id: str) -> list[dict[str, str]]:
        """``part.snapshot`` payloads for the session's streaming parts, oldest first."""
        return [
            {
                "session_id": p.session_id,
                "message_id": p.message_id,
                "part_id": p.part_id,
                "field": p.field,
                "text": p.text,
            }
            for p in sorted(self._parts.values(), key=lambda p: p.part_id)
            if p.session_id == session_id
        ]


buffer = InflightBuffer()
