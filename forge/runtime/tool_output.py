"""A tool output too large for the log: stored whole as a file of the session.

A tool's output is logged raw (the tool part's ``state.output``) up to
``FORGE_TOOL_OUTPUT_MAX_BYTES`` (UTF-8 bytes; 10 MB by default). A larger one
is never cut silently: the whole output is saved among the session's files
(``forge.runtime.files``: keyed by tenant and session, deleted with it), a
``file`` part (``text/plain``) is written in the reply, and the tool part's
output holds the output's head and a note naming that part, its metadata
``output_file = {part_id, url, bytes}``. The file's URL
(``/api/sessions/<id>/files/<part_id>/``) serves all of it to the session's
tenant. The model sees the head, cut as any long output is
(:mod:`forge.context.tool_output`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from forge.context.tool_output import MODEL_OUTPUT_CHARS
from forge.tools import ToolResult
from sessions.ids import new_part_id
from sessions.models import Session

from .files import file_url, upload_path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Spilled:
    """An oversized output, stored: the file part to write before the tool part's
    result, and that result (head, note, ``metadata.output_file``)."""

    file_part: dict[str, Any]
    result: ToolResult
    path: str  # in the default storage, to delete if the log refuses the parts


def may_be_oversized(result: ToolResult) -> bool:
    """Whether the output may be over the cap (cheap: UTF-8 takes at most 4 bytes a
    character), so that most calls skip :func:`spill_if_oversized`'s thread."""
    return len(result.output) > int(settings.FORGE_TOOL_OUTPUT_MAX_BYTES) // 4


def spill_if_oversized(
    *, session: Session, message_id: str, tool: str, call_id: str, result: ToolResult
) -> Spilled | None:
    """None when the output fits the log; else store it and say what to write.

    Runs off the event loop (it encodes and writes up to the whole output). The
    file is written before any part names it, so a part never points at nothing.
    """
    cap = int(settings.FORGE_TOOL_OUTPUT_MAX_BYTES)
    if not may_be_oversized(result):
        return None
    data = result.output.encode()
    if len(data) <= cap:
        return None
    part_id = new_part_id()
    filename = (_UNSAFE.sub("_", f"{tool}-{call_id}").strip("._") or "output")[:100] + ".txt"
    path = default_storage.save(upload_path(session, part_id, filename), ContentFile(data))
    url = file_url(session.pk, part_id)
    note = (
        f"\n\n[output of {len(data)} bytes, over the log's limit of {cap} bytes: stored "
        f"whole as file part {part_id} ({url}); above are its first {{kept}} characters; "
        f"history_read with part_id {part_id!r} and an offset reads the rest]"
    )
    # The head the log keeps: what the model is shown at most, and at most half the cap
    # in bytes (QA: 48,065 three-byte characters, 144 KB, kept under a 20 KB cap, and a
    # note counting more characters than the output had).
    room = max(MODEL_OUTPUT_CHARS - len(note.format(kept=MODEL_OUTPUT_CHARS)), 0)
    head = result.output[:room].encode()[: cap // 2].decode("utf-8", "ignore")
    output = head + note.format(kept=len(head))
    metadata = {
        **result.metadata,
        "output_file": {"part_id": part_id, "url": url, "bytes": len(data)},
    }
    file_part = {
        "id": part_id,
        "message_id": message_id,
        "type": "file",
        "mime": "text/plain",
        "filename": filename,
        "url": url,
    }
    return Spilled(file_part, replace(result, output=output, metadata=metadata), path)


def delete_spilled(spilled: Spilled) -> None:
    default_storage.delete(spilled.path)
