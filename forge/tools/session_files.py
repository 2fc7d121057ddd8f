"""Where a session's stored files live, and reading a tool output stored as one.

``uploads/t<tenant>/<session>/<part_id>/<name>`` in the default storage: keyed by
tenant and session, so no session of another tenant can ever name them (see
``forge.runtime.files``, which deletes them with the session). Here, below the
runtime, because the history tools read them too (``history_read``).
"""

from __future__ import annotations

from typing import Any

from django.core.files.storage import default_storage

from accounts.ids import is_valid_id
from sessions.models import Session


def uploads_dir(*, tenant_id: int, session_id: str) -> str:
    return f"uploads/t{tenant_id}/{session_id}"


def file_url(session_id: str, part_id: str) -> str:
    """The URL a ``file`` part names for its stored file: the session's files route
    (``GET /api/sessions/<id>/files/<part_id>/``, ``forge.api.files``), which checks who
    asks. (``MEDIA_URL`` is served by nothing, and its path showed the tenant's number.)"""
    return f"/api/sessions/{session_id}/files/{part_id}/"


def upload_path(session: Session, part_id: str, filename: str) -> str:
    return f"{uploads_dir(tenant_id=session.tenant_id, session_id=session.pk)}/{part_id}/{filename}"


def stored_file(*, tenant_id: int, session_id: str, part_id: str) -> str | None:
    """The storage path of file part ``part_id``'s file (one file in its folder), or None.

    None too when an id is no id (``..``, ``/``): a tool part's ``output_file.part_id``
    comes from the log, which an import's author wrote, and the storage resolves
    ``../`` (``uploads/t1/<copy>/../../t2/<theirs>/<part>`` named another tenant's
    file; QA)."""
    if not (is_valid_id(session_id) and is_valid_id(part_id)):
        return None
    folder = f"{uploads_dir(tenant_id=tenant_id, session_id=session_id)}/{part_id}"
    try:
        _, names = default_storage.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return f"{folder}/{names[0]}" if len(names) == 1 else None


def whole_output(session: Session, part: dict[str, Any]) -> str:
    """A completed tool part's whole output: its stored file when the output was over
    the log's cap (``metadata.output_file``), else the logged output."""
    state = part.get("state") or {}
    spilled = (state.get("metadata") or {}).get("output_file")
    if not isinstance(spilled, dict) or not spilled.get("part_id"):
        return str(state.get("output", ""))
    path = stored_file(
        tenant_id=session.tenant_id, session_id=session.pk, part_id=str(spilled["part_id"])
    )
    if path is None:  # the file is gone (never the case while the session lives)
        return str(state.get("output", ""))
    with default_storage.open(path, "rb") as handle:
        return handle.read().decode("utf-8", errors="replace")
