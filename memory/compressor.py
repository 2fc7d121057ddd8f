"""MessageCompressor: what the summarizer reads of a dialogue increment.

Drops reasoning (and messages left empty), strips white space (ends of the
text, trailing spaces on lines, runs of blank lines), caps tool output, and
merges consecutive messages of one role. The unit keeps the raw messages;
only the summarizer's input is compressed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .normalize import Msg
from .wire import message_fields

TOOL_OUTPUT_CHARS = 2000
DROPPED_ROLES = frozenset({"reasoning"})

_TRAILING_SPACE = re.compile(r"[ \t\f\v]+(?=\n)")
_BLANK_LINES = re.compile(r"\n{3,}")


def strip_text(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _TRAILING_SPACE.sub("", text)
    return _BLANK_LINES.sub("\n\n", text).strip()


def cap(text: str, limit: int) -> str:
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n… [{len(text) - limit} more characters]"


def compress(
    messages: Iterable[Msg], *, tool_output_chars: int = TOOL_OUTPUT_CHARS
) -> list[dict[str, Any]]:
    """``[{role, text, at}]``: oldest first, no two neighbours of one role; ``at`` is the
    time of the first message merged into each."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role in DROPPED_ROLES:
            continue
        text = strip_text(message.text)
        if message.role == "tool":
            text = cap(text, tool_output_chars)
        if not text:
            continue
        if out and out[-1]["role"] == message.role:
            out[-1]["text"] += "\n\n" + text
        else:
            out.append(message_fields(role=message.role, text=text, at=message.at))
    return out
