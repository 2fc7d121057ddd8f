"""A session's files outside the database: its uploads and its workspace.

Both are keyed by tenant and session (``uploads/t<tenant>/<session>/…``,
``FORGE_WORKSPACE_ROOT/t<tenant>/<session>``), so no session of another tenant
can ever name them, and both are removed when the session is deleted (on the
store's ``session_deleted`` signal, after the deletion commits).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Iterable
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from forge.tools.base import ToolFile
from forge.tools.sandbox import delete_workspace
from forge.tools.session_files import file_url, upload_path, uploads_dir
from sessions.ids import new_part_id
from sessions.models import Session

__all__ = [
    "delete_session_files",
    "file_parts",
    "file_url",
    "on_session_deleted",
    "store_file",
    "upload_path",
    "uploads_dir",
]

logger = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def store_file(session: Session, part_id: str, filename: str, content: bytes) -> str:
    """Store a file the reply carries (a tool's image, say) among the session's uploads,
    under its ``file`` part's id; returns the URL the part names. Blocking."""
    name = _SAFE_NAME.sub("_", filename.rsplit("/", 1)[-1]).strip("._")[:120] or "file"
    default_storage.save(upload_path(session, part_id, name), ContentFile(content))
    return file_url(session.pk, part_id)


async def file_parts(
    session: Session, message_id: str, files: Iterable[ToolFile]
) -> list[dict[str, Any]]:
    """A tool's files stored (:func:`store_file`), as the ``file`` parts that name them."""
    parts = []
    for item in files:
        part_id = new_part_id()
        url = await asyncio.to_thread(store_file, session, part_id, item.filename, item.data)
        parts.append(
            {
                "id": part_id,
                "message_id": message_id,
                "type": "file",
                "mime": item.mime,
                "filename": item.filename,
                "url": url,
            }
        )
    return parts


def delete_session_files(*, tenant_id: int, session_id: str) -> None:
    delete_workspace(session_id, tenant_id=tenant_id)
    directory = uploads_dir(tenant_id=tenant_id, session_id=session_id)
    try:
        local = default_storage.path(directory)
    except NotImplementedError:  # a remote storage: delete file by file
        _delete_tree(directory)
    else:
        shutil.rmtree(local, ignore_errors=True)


def _delete_tree(directory: str) -> None:
    if not default_storage.exists(directory):
        return
    folders, files = default_storage.listdir(directory)
    for name in files:
        default_storage.delete(f"{directory}/{name}")
    for name in folders:
        _delete_tree(f"{directory}/{name}")


def on_session_deleted(sender: Any, *, tenant_id: int, session_id: str, **kwargs: Any) -> None:
    try:
        delete_session_files(tenant_id=tenant_id, session_id=session_id)
    except Exception:
        logger.exception("could not delete the files of session %s", session_id)
