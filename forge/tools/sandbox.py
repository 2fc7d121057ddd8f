"""The sandbox: a session's workspace directory, and the path checks every file tool uses.

Every session gets ``settings.FORGE_WORKSPACE_ROOT / <session id>``
(:func:`workspace_path`). The tools only ever touch paths that
:func:`resolve_in_workspace` accepts: relative paths that stay inside the
workspace after resolving ``..`` and symbolic links. Files are opened with
``O_NOFOLLOW`` (a symlink swapped in after the check is refused) and
``O_NONBLOCK`` (a FIFO cannot hang a call), and written by renaming a new file
over the old (:func:`write_replacing`). The sandbox is a path check, not an
OS-level jail: it holds against the model (which can only use these tools and
cannot create symlinks), not against another process racing on the same
directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from .base import ToolContext, ToolError

SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def workspace_path(session_id: str, *, tenant_id: int, create: bool = True) -> Path:
    """``FORGE_WORKSPACE_ROOT / t<tenant id> / <session id>``, created if missing (unless
    ``create=False``: the tools create it on first use, so a session that never uses
    one has none).

    Keyed by tenant as well as session: a session id is no secret (it is in URLs
    and exports), so a session of another tenant that somehow carried the same
    id still could not name this directory.

    Raises :class:`ValueError` for a session id that is not ``[A-Za-z0-9_-]{1,64}``.
    """
    if not isinstance(session_id, str) or SESSION_ID_RE.fullmatch(session_id) is None:
        raise ValueError(f"invalid session id for a workspace: {session_id!r}")
    if isinstance(tenant_id, bool) or not isinstance(tenant_id, int):
        raise ValueError(f"invalid tenant id for a workspace: {tenant_id!r}")
    tenant = Path(settings.FORGE_WORKSPACE_ROOT) / f"t{tenant_id}"
    path = tenant / session_id
    if create:
        # The tenant's folder too is its own (``mkdir(parents=True)`` gives parents the
        # default mode: other local accounts listed every session of the tenant).
        tenant.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    return path


def resolve_in_workspace(workspace: Path, relative: str) -> Path:
    """The real path of ``relative`` inside ``workspace``, or :class:`ToolError`.

    Refused: a non-string or empty (all-blank) path, a NUL byte, an absolute path,
    and anything that resolves (``..``, symbolic links) outside the workspace.
    The path need not exist. The returned path has every symlink resolved.
    """
    if not isinstance(relative, str) or not relative.strip():
        raise ToolError("path is empty; give a path relative to the workspace")
    if "\0" in relative:
        raise ToolError("path contains a NUL byte")
    if relative.startswith(("/", "\\")) or Path(relative).is_absolute():
        raise ToolError(
            f"path {relative!r} is absolute; give a path relative to the workspace",
            metadata={"path": relative},
        )
    if os.path.normpath(relative).split(os.sep)[0] == os.pardir:
        raise ToolError(f"path {relative!r} escapes the workspace", metadata={"path": relative})
    try:
        root = Path(workspace).resolve()
        target = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        # Not ``exc`` itself: it names the absolute path, which the model and every
        # reader of the history would see (QA: "Symlink loop from '/srv/…/t1/ses_…'").
        why = getattr(exc, "strerror", None) or (
            "a loop of symbolic links" if isinstance(exc, RuntimeError) else type(exc).__name__
        )
        raise ToolError(
            f"cannot resolve path {relative!r}: {why}", metadata={"path": relative}
        ) from exc
    if not target.is_relative_to(root):
        raise ToolError(
            f"path {relative!r} leads outside the workspace (through a symbolic link)",
            metadata={"path": relative},
        )
    return target


def workspace_of(ctx: ToolContext) -> Path:
    try:
        ctx.workspace.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        ctx.workspace.mkdir(mode=0o700, exist_ok=True)
        return ctx.workspace.resolve()
    except OSError as exc:
        raise ToolError(f"the workspace is not usable: {exc.strerror or exc}") from exc


def stat_or_none(path: Path, rel: str) -> os.stat_result | None:
    """``os.stat`` of ``path``, None when nothing is there; another failure (a name too
    long) is the tool's error, naming the path as the model gave it (``Path.exists``
    raised it, with the absolute path, to the model and the history: QA)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_error(exc, rel) from exc


def relative(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return rel if rel else "."


def shown(name: str) -> str:
    """A file name as text: the bytes of a name that is not UTF-8 (``os`` gives them as
    lone surrogates) shown as U+FFFD. Such a name in a listing or a patch part, which
    the log refuses, failed the whole reply (QA: an archive's Latin-1 names)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def write_replacing(path: Path, rel: str, data: bytes, *, create: bool) -> None:
    """Write ``data`` as the whole new content of the regular file at ``path``: into a
    new file beside it, then renamed over it. A failed write (a full disk) leaves the
    file as it was and nothing half-written behind (QA: an edit that hit a full disk
    left the file cut off, its old content gone); and a name that is a hard link to a
    file elsewhere gets a file of its own instead of writing through to that one.

    Refused: a name that is a symbolic link or not a regular file, and, unless
    ``create``, a name that does not exist. A new file gets mode 0644; a replaced one
    keeps its mode."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise os_error(exc, rel) from exc
    if st is None and not create:
        raise ToolError(f"no such file or directory: {rel}", metadata={"path": rel})
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise ToolError(f"refusing to follow a symbolic link: {rel}", metadata={"path": rel})
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{rel} is a directory", metadata={"path": rel})
        raise ToolError(f"{rel} is not a regular file", metadata={"path": rel})
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".forge-write-")
    except OSError as exc:
        raise os_error(exc, rel) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise os_error(exc, rel) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def os_error(exc: OSError, rel: str) -> ToolError:
    if isinstance(exc, FileNotFoundError):
        message = f"no such file or directory: {rel}"
    elif isinstance(exc, IsADirectoryError):
        message = f"{rel} is a directory"
    elif isinstance(exc, NotADirectoryError):
        message = f"{rel}: a parent of this path is not a directory"
    elif isinstance(exc, PermissionError):
        message = f"permission denied: {rel}"
    elif exc.errno == errno.ELOOP:
        message = f"refusing to follow a symbolic link: {rel}"
    else:
        message = f"{rel}: {exc.strerror or exc}"
    return ToolError(message, metadata={"path": rel, "errno": exc.errno})


def open_regular(path: Path, rel: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` (no symlink, no blocking) and make sure it is a regular file."""
    try:
        fd = os.open(path, flags | O_NOFOLLOW | O_NONBLOCK)
    except OSError as exc:
        raise os_error(exc, rel) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{rel} is a directory; use list_files", metadata={"path": rel})
        raise ToolError(f"{rel} is not a regular file", metadata={"path": rel})
    return fd, st


def sorted_entries(directory: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda entry: entry.name)
    except OSError:
        return iter(())
    return iter(entries)


# The ``path`` input of the tools that take one file.


def delete_workspace(session_id: str, *, tenant_id: int) -> None:
    """Remove the session's workspace, if it has one (its files go with the session)."""
    shutil.rmtree(workspace_path(session_id, tenant_id=tenant_id, create=False), ignore_errors=True)
