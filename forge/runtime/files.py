"""A session's files outside the database: its uploads and its workspace.

Both are keyed by tenant and session (``uploads/t<tenant>/<session>/…``,
``FORGE_WORKSPACE_ROOT/t<tenant>/<session>``), so no session of another tenant
can ever name them, and both are removed when the session is deleted (on the
store's ``session_deleted`` signal, after the deletion commits).
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from django.core.files.storage import default_storage

from forge.tools.sandbox import delete_workspace
from forge.tools.session_files import upload_path, uploads_dir

__all__ = ["delete_session_files", "on_session_deleted", "upload_path", "uploads_dir"]

logger = logging.getLogger(__name__)


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
