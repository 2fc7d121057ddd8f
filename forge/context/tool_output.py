"""What the model is shown of a tool's output: its projection, never the log's copy.

The log keeps a tool's output whole (up to ``FORGE_TOOL_OUTPUT_MAX_BYTES``;
beyond it, whole in a ``file`` part the tool part names). The model's request
never holds more of one output than it did when outputs were cut before they
were logged: :data:`MODEL_OUTPUT_CHARS`, marker included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MODEL_OUTPUT_CHARS = 50_000


def model_output(part: Mapping[str, Any]) -> str:
    """A completed tool part's output as the model sees it: whole up to
    :data:`MODEL_OUTPUT_CHARS`, else its head and a marker saying how much is left out
    and how to read the rest (``history_read`` with the part's id). Deterministic: the
    same part gives the same text, so replay and the context cache stay exact."""
    output = str(part["state"]["output"])
    return cut(
        output,
        f"\n\n[output truncated: showing the first {{kept}} of {len(output)} characters; "
        f"history_read with part_id {part.get('id', '')!r} and an offset reads the rest]",
    )


def cut(text: str, marker: str) -> str:
    """``text`` whole up to :data:`MODEL_OUTPUT_CHARS`, else its head and ``marker`` (its
    ``{kept}`` the characters kept), the two together :data:`MODEL_OUTPUT_CHARS` long."""
    if len(text) <= MODEL_OUTPUT_CHARS:
        return text
    kept = MODEL_OUTPUT_CHARS - len(marker.format(kept=MODEL_OUTPUT_CHARS))
    return text[:kept] + marker.format(kept=kept)
