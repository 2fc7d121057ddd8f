"""Client-side bookkeeping for stream tests: rebuild streaming texts from frames,
refusing any hole or repeat."""

from __future__ import annotations

from typing import Any


class Text:
    def __init__(self) -> None:
        self.parts: dict[str, str] = {}
        self.finished: dict[str, str] = {}  # part id -> final text from its closing event

    def apply(self, frame: dict[str, Any]) -> None:
        if frame["kind"] == "snapshot":
            assert frame["text"].startswith(self.parts.get(frame["part_id"], "")), (
                "a snapshot went back"
            )
            self.parts[frame["part_id"]] = frame["text"]
        elif frame["kind"] == "delta":
            have = self.parts.get(frame["part_id"], "")
            assert frame["offset"] == len(have), (
                f"hole or repeat: offset {frame['offset']}, have {len(have)}"
            )
            self.parts[frame["part_id"]] = have + frame["delta"]
        elif frame["kind"] == "event" and frame["type"] == "part.updated":
            part = frame["data"]
            if part["type"] in ("text", "reasoning"):
                if part["time"].get("end"):
                    self.finished[part["id"]] = part["text"]
                    self.parts[part["id"]] = part["text"]
                else:
                    self.parts.setdefault(part["id"], part["text"])
