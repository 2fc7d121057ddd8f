"""A session's files outside the database: its uploads and its workspace.

Both are keyed by tenant and session (``uploads/t<tenant>/<session>/…``,
``FORGE_WORKSPACE_ROOT/t<tenant>/<session>``), so no session of another tenant
can ever name them, and both are removed when the session is deleted (on the
store's ``session_deleted`` signal, after the deletion commits).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.files.base import ContentFile, File
from django.core.files.storage import default_storage

from forge.errors import InvalidPrompt
from forge.tools.base import ToolError, ToolFile
from forge.tools.sandbox import (
    delete_workspace,
    resolve_in_workspace,
    workspace_path,
    write_replacing,
)
from forge.tools.session_files import file_url, stored_file, upload_path, uploads_dir
from sessions import services
from sessions.ids import new_part_id
from sessions.models import Session

from .subtask import workspace_session_id

__all__ = [
    "delete_session_files",
    "file_parts",
    "file_url",
    "on_part_copying",
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


# The files route a ``file`` part names (``file_url``): whose session, which part.
_FILE_URL = re.compile(r"/api/sessions/([A-Za-z0-9_-]{1,64})/files/([A-Za-z0-9_-]{1,64})/")


def on_part_copying(
    sender: Any,
    *,
    part: dict[str, Any],
    session: Session,
    files: set[Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any] | None:
    """``sessions.signals.part_copying``: a part a fork or an import's copy writes
    names its file in the copy, never in another session.

    A ``file`` part naming a stored file (``/api/sessions/<S>/files/<P>/``) whose
    session ``S`` is of the copy's tenant and still holds the file: the file is copied
    among the copy's files, under the copy's part id, in the copy's transaction (its
    source cannot be deleted meanwhile: a fork holds the source's row); a copy that
    fails takes its copies back (``session_deleted``, sent for it). When it cannot be
    (another tenant's or another server's session, one deleted since, a file gone):
    the part is kept, naming the copy's own files route, which answers 404; it named
    the source's file, which the copy's readers may not be allowed to read, and which
    goes when the source goes. Any other path of this server (``../`` in it, an old
    ``/media/…`` one, a crafted log's) names the copy's route too: a copy holds no
    link into the server that its parts did not put there. An http(s) link is left as
    it is. A tool part's ``metadata.output_file`` names the copy's part its id was
    renamed to (its bytes travel with that ``file`` part).

    Each stored file is carried once per copy (``files`` notes them): a crafted log of
    many parts naming one upload had it written again for each (QA: a disk filled by
    one import); another part naming it names the copy's route too, which answers 404.
    """
    if part.get("type") == "file" and isinstance(part.get("url"), str):
        named = _FILE_URL.fullmatch(part["url"])
        if named is None:
            if part["url"].startswith("/"):  # a path of this server that names no file
                return {**part, "url": file_url(session.pk, part["id"])}
            return None
        source = (named.group(1), named.group(2))
        if files is None or source not in files:
            if files is not None:
                files.add(source)
            _copy_stored_file(source_id=source[0], source_part=source[1], copy=session, part=part)
        return {**part, "url": file_url(session.pk, part["id"])}
    state = part.get("state")
    if not isinstance(state, dict) or not isinstance(state.get("metadata"), dict):
        return None
    metadata: dict[str, Any] = state["metadata"]
    spilled = metadata.get("output_file")
    if not isinstance(spilled, dict) or not isinstance(spilled.get("part_id"), str):
        return None
    spilled = {**spilled, "url": file_url(session.pk, spilled["part_id"])}
    return {**part, "state": {**state, "metadata": {**metadata, "output_file": spilled}}}


def _copy_stored_file(
    *, source_id: str, source_part: str, copy: Session, part: dict[str, Any]
) -> bool:
    """Copy file part ``source_part``'s file of session ``source_id`` to ``copy``'s files
    under ``part``'s id, when that session is of the copy's tenant and has the file."""
    if not Session.objects.filter(pk=source_id, tenant_id=copy.tenant_id).exists():
        return False
    path = stored_file(tenant_id=copy.tenant_id, session_id=source_id, part_id=source_part)
    if path is None:
        return False
    name = path.rsplit("/", 1)[-1]
    try:
        source = default_storage.open(path, "rb")
    except FileNotFoundError:  # gone since it was found: an import holds no source
        return False
    with source:
        default_storage.save(upload_path(copy, part["id"], name), File(source, name=name))
    return True


def fork_session(*, session: Session, user: AbstractBaseUser, before_message_id: str) -> Session:
    """A fork of ``session`` before ``before_message_id`` (``services.fork_session``) that
    also has the files of the session's workspace, as they are now: a workspace keeps
    no history, so not as they were at the fork point. Without them the fork's history
    said "wrote p.txt" and its tools found no p.txt (QA). A workspace that cannot be
    copied leaves the fork with what was copied, and a warning logged."""
    fork = services.fork_session(session=session, user=user, before_message_id=before_message_id)
    source = workspace_path(
        workspace_session_id(session), tenant_id=session.tenant_id, create=False
    )
    if source.is_dir():
        target = workspace_path(fork.pk, tenant_id=fork.tenant_id, create=False)
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.copytree(source, target, symlinks=True, ignore=_special_files)
        except (OSError, shutil.Error) as exc:
            logger.warning(
                "could not copy the workspace of %s to its fork %s: %s", session.pk, fork.pk, exc
            )
    return fork


def put_in_workspace(session: Session, name: str, content: bytes) -> tuple[str, Path]:
    """Save an attachment the model is not shown inline into the session's workspace,
    as ``uploads/<name>`` (``name-2.ext`` … when taken): its path there, and the file.
    A 150 KB CSV or an image reached the model as a name alone, which no tool could
    open (QA); the workspace's tools (and MCP tools given the workspace) can."""
    root = workspace_path(workspace_session_id(session), tenant_id=session.tenant_id, create=True)
    folder = _uploads_folder(root)
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        stem, dot, extension = name, "", ""
    for n in range(1, 1000):
        candidate = name if n == 1 else f"{stem}-{n}{dot}{extension}"
        target = folder / candidate
        if not os.path.lexists(target):
            break
    else:
        raise ValueError(f"no free name for {name!r} among the workspace's uploads")
    rel = f"uploads/{candidate}"
    write_replacing(target, rel, content, create=True)
    return rel, target


def _uploads_folder(root: Path) -> Path:
    """The workspace's ``uploads`` folder, made when missing; a link to a folder inside
    the workspace is followed. ``InvalidPrompt`` (400) when it is no folder of the
    workspace: a link outside it (left by someone with the server's account, or copied
    by a fork), a dangling link, a file. A link's target took the prompt's files, out
    of every tool's reach (QA); the prompt is refused, nothing written."""
    folder = root / "uploads"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        real = resolve_in_workspace(root, "uploads")
    except ToolError as exc:
        raise InvalidPrompt(f"the workspace's uploads/ cannot take files: {exc.message}") from None
    except OSError:  # a file, or a link to nothing: mkdir finds the name taken
        real = None
    if real is None or not real.is_dir():
        raise InvalidPrompt(
            "the workspace's uploads is not a folder (a file or a broken link): the files "
            "of a prompt are saved there"
        )
    return real


def _special_files(directory: str, names: list[str]) -> set[str]:
    """What a workspace's copy leaves out: FIFOs, sockets, devices (a FIFO would block
    the copy); links are copied as links, never followed."""
    left_out = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            left_out.add(name)
    return left_out


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
