"""The per-session workspace: a sandbox directory, four file tools, and snapshots.

Every session gets ``settings.FORGE_WORKSPACE_ROOT / <session id>``
(:func:`workspace_path`). The tools below only ever touch paths that
:func:`resolve_in_workspace` accepts: relative paths that stay inside the
workspace after resolving ``..`` and symbolic links. Files are opened with
``O_NOFOLLOW`` (a symlink swapped in after the check is refused) and
``O_NONBLOCK`` (a FIFO cannot hang a call). The sandbox is a path check, not an
OS-level jail: it holds against the model (which can only use these tools and
cannot create symlinks), not against another process racing on the same
directory.

Limits (module constants):

* ``list_files``: recursive, at most :data:`LIST_MAX_ENTRIES` (1000) entries;
  symbolic links are listed, never followed.
* ``read_file``: a file over :data:`READ_MAX_BYTES` (256 KiB) must be read by
  line range (``offset``/``limit``). One call reads at most 256 KiB and returns at
  most :data:`READ_MAX_CHARS` (48,000) characters, cut at a line end, with a
  "continue with offset=N" note (so a whole-file read of a 100 KiB file comes in
  pieces; ``execute()`` would otherwise cut it at 50,000 characters with no way
  to continue). A file whose first :data:`BINARY_SNIFF_BYTES` (8 KiB) contain a
  NUL byte is binary and refused. Invalid UTF-8 is shown with replacement
  characters.
* ``write_file``: content up to :data:`WRITE_MAX_BYTES` (1 MiB, UTF-8 encoded).
* ``edit_file``: files up to 1 MiB, before and after the edit; must be UTF-8 text.
* :func:`snapshot`: at most :data:`SNAPSHOT_MAX_FILES` (10,000) files (walking
  breadth-first in sorted order; the rest are left out and ``Snapshot.truncated``
  is set);
  files over :data:`SNAPSHOT_MAX_FILE_BYTES` (1 MiB), and every file once
  :data:`SNAPSHOT_MAX_TOTAL_BYTES` (64 MiB) of content has been hashed, are
  fingerprinted by size + mtime instead of content. Symlinks are fingerprinted
  by their target; FIFOs, sockets and devices are ignored.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from django.conf import settings

from .base import ToolContext, ToolError, ToolResult
from .execute import MAX_OUTPUT_CHARS
from .registry import tool

SESSION_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

LIST_MAX_ENTRIES = 1000
READ_MAX_BYTES = 256 * 1024
# Characters one read_file call returns, cut at a line end: below execute()'s output cap, so
# the continuation hint ("continue with offset=N") is never cut off.
READ_MAX_CHARS = MAX_OUTPUT_CHARS - 2_000
WRITE_MAX_BYTES = 1024 * 1024
EDIT_MAX_BYTES = WRITE_MAX_BYTES
BINARY_SNIFF_BYTES = 8192
SNAPSHOT_MAX_FILES = 10_000
SNAPSHOT_MAX_FILE_BYTES = 1024 * 1024
SNAPSHOT_MAX_TOTAL_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


# --- the sandbox --------------------------------------------------------------------


def workspace_path(session_id: str, *, create: bool = True) -> Path:
    """``FORGE_WORKSPACE_ROOT / session_id``, created if missing (unless ``create=False``:
    the tools create it on first use, so a session that never uses one has none).

    Raises :class:`ValueError` for a session id that is not ``[A-Za-z0-9_-]{1,64}``.
    """
    if not isinstance(session_id, str) or SESSION_ID_RE.fullmatch(session_id) is None:
        raise ValueError(f"invalid session id for a workspace: {session_id!r}")
    path = Path(settings.FORGE_WORKSPACE_ROOT) / session_id
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
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
        raise ToolError(
            f"cannot resolve path {relative!r}: {exc}", metadata={"path": relative}
        ) from exc
    if not target.is_relative_to(root):
        raise ToolError(
            f"path {relative!r} leads outside the workspace (through a symbolic link)",
            metadata={"path": relative},
        )
    return target


def _root(ctx: ToolContext) -> Path:
    try:
        ctx.workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
        return ctx.workspace.resolve()
    except OSError as exc:
        raise ToolError(f"the workspace is not usable: {exc.strerror or exc}") from exc


def _rel(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return rel if rel else "."


def _os_error(exc: OSError, rel: str) -> ToolError:
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


def _open_regular(path: Path, rel: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` (no symlink, no blocking) and make sure it is a regular file."""
    try:
        fd = os.open(path, flags | _O_NOFOLLOW | _O_NONBLOCK)
    except OSError as exc:
        raise _os_error(exc, rel) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{rel} is a directory; use list_files", metadata={"path": rel})
        raise ToolError(f"{rel} is not a regular file", metadata={"path": rel})
    return fd, st


def _is_binary(sample: bytes) -> bool:
    return b"\0" in sample[:BINARY_SNIFF_BYTES]


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n < 1024 * 1024 else f"{n // (1024 * 1024)} MiB"


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"{what} is not valid Unicode text ({exc.reason})") from exc


# --- list_files -----------------------------------------------------------------------


def _sorted_entries(directory: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda entry: entry.name)
    except OSError:
        return iter(())
    return iter(entries)


# The ``path`` input of the tools that take one file.
FILE_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "File path, relative to the workspace root.",
}


@tool(
    name="list_files",
    description=(
        "List the files in the session's workspace, recursively: one path per line, "
        "relative to the workspace root, directories ending in '/'. At most "
        f"{LIST_MAX_ENTRIES} entries; list a subdirectory to see more."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Directory to list, relative to the workspace root. Default '.'.",
            }
        },
        "additionalProperties": False,
    },
)
def list_files(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    root = _root(ctx)
    requested = args.get("path") or "."
    directory = resolve_in_workspace(root, requested)
    rel_dir = _rel(root, directory)
    if not directory.exists():
        raise ToolError(f"no such directory: {rel_dir}", metadata={"path": rel_dir})
    if not directory.is_dir():
        raise ToolError(f"{rel_dir} is not a directory; use read_file", metadata={"path": rel_dir})

    entries: list[str] = []
    truncated = False
    stack = [_sorted_entries(str(directory))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if len(entries) >= LIST_MAX_ENTRIES:
            truncated = True
            break
        rel = Path(entry.path).relative_to(root).as_posix()
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            entries.append(rel + "/")
            stack.append(_sorted_entries(entry.path))
        else:
            entries.append(rel)

    output = "\n".join(entries) if entries else "(empty directory)"
    if truncated:
        output += (
            f"\n[listing truncated at {LIST_MAX_ENTRIES} entries; list a subdirectory to see more]"
        )
    return ToolResult(
        output=output,
        title=f"list {rel_dir}",
        metadata={"count": len(entries), "truncated": truncated},
    )


# --- read_file ------------------------------------------------------------------------


def _read_range(f: BinaryIO, offset: int, limit: int | None) -> tuple[bytes, int, bool, bool]:
    """Lines ``offset`` .. ``offset + limit - 1`` (1-based), at most READ_MAX_BYTES.

    Returns (data, lines returned, truncated by the byte limit, offset past the end).
    Reads with bounded ``readline`` calls, so one huge line cannot fill memory.
    """
    line = 1
    while line < offset:
        piece = f.readline(_CHUNK)
        if not piece:
            return b"", 0, False, True
        # A whole line, or the last one (no newline; shorter than asked means end of file).
        if piece.endswith(b"\n") or len(piece) < _CHUNK:
            line += 1
    out = bytearray()
    count = 0
    while limit is None or count < limit:
        room = READ_MAX_BYTES - len(out)
        piece = f.readline(room + 1)
        if not piece:
            break
        if len(piece) > room:
            out += piece[:room]
            return bytes(out), count, True, False
        out += piece
        count += 1
    if offset > 1 and count == 0:
        # Skipped exactly to the end: the offset is one past the last line.
        return b"", 0, False, True
    return bytes(out), count, False, False


def _fit(text: str, limit: int) -> tuple[str, int, bool]:
    """Cut ``text`` to at most ``limit`` characters at a line end: (text, full lines, cut)."""
    if len(text) <= limit:
        return text, 0, False
    end = text.rfind("\n", 0, limit)
    if end == -1:  # the first line alone is longer than the limit
        return text[:limit], 0, True
    return text[: end + 1], text.count("\n", 0, end + 1), True


@tool(
    name="read_file",
    description=(
        "Read a text file from the session's workspace. For a file over "
        f"{_kib(READ_MAX_BYTES)}, give a line range with 'offset' (first line, 1-based) "
        f"and/or 'limit' (number of lines). At most {READ_MAX_CHARS} characters come back "
        "per call; a longer read ends with a note telling the offset to continue from. "
        "Binary files are refused."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": FILE_PATH,
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "Line number to start at (1-based).",
            },
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)
def read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    root = _root(ctx)
    path = resolve_in_workspace(root, args["path"])
    rel = _rel(root, path)
    offset = int(args["offset"]) if args.get("offset") is not None else None
    limit = int(args["limit"]) if args.get("limit") is not None else None
    ranged = offset is not None or limit is not None

    start = offset or 1

    fd, st = _open_regular(path, rel, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        if _is_binary(f.read(BINARY_SNIFF_BYTES)):
            raise ToolError(
                f"{rel} is a binary file ({st.st_size} bytes); read_file only reads text",
                metadata={"path": rel, "bytes": st.st_size},
            )
        if not ranged and st.st_size > READ_MAX_BYTES:
            raise ToolError(
                f"{rel} is {st.st_size} bytes, over the {_kib(READ_MAX_BYTES)} limit for a "
                "whole file; read a line range with 'offset' and 'limit'",
                metadata={"path": rel, "bytes": st.st_size},
            )
        f.seek(0)
        data, count, truncated, past_end = _read_range(f, start, limit)

    if past_end:
        raise ToolError(
            f"offset {start} is past the end of {rel}",
            metadata={"path": rel, "offset": start},
        )
    output, shown, cut = _fit(data.decode("utf-8", errors="replace"), READ_MAX_CHARS)
    if cut:
        count, truncated = shown, True
    if truncated:
        if count:
            output += (
                f"\n[truncated: showing lines {start}-{start + count - 1}; "
                f"continue with offset={start + count}]"
            )
        else:
            output += f"\n[truncated: line {start} is too long to show whole; this is its start]"
    return ToolResult(
        output=output,
        title=f"read {rel}",
        metadata={
            "path": rel,
            "bytes": st.st_size,
            "offset": start,
            "lines": count,
            "truncated": truncated,
        },
    )


# --- write_file -----------------------------------------------------------------------


def _write(path: Path, rel: str, data: bytes, *, create: bool) -> None:
    flags = os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags | _O_NOFOLLOW | _O_NONBLOCK, 0o644)
    except OSError as exc:
        raise _os_error(exc, rel) from exc
    with os.fdopen(fd, "wb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ToolError(f"{rel} is not a regular file", metadata={"path": rel})
        f.write(data)


@tool(
    name="write_file",
    description=(
        "Write a text file in the session's workspace, replacing it if it exists and "
        f"creating parent directories. Content is at most {_kib(WRITE_MAX_BYTES)}."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": FILE_PATH,
            "content": {"type": "string", "description": "The whole new content of the file."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
)
def write_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    root = _root(ctx)
    data = _encode(args["content"], "content")
    if len(data) > WRITE_MAX_BYTES:
        raise ToolError(
            f"content is {len(data)} bytes, over the {_kib(WRITE_MAX_BYTES)} limit",
            metadata={"bytes": len(data)},
        )
    path = resolve_in_workspace(root, args["path"])
    rel = _rel(root, path)
    if path.is_dir():
        raise ToolError(f"{rel} is a directory", metadata={"path": rel})
    created = not path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ToolError(
            f"cannot create {rel}: a parent of this path is a file, not a directory",
            metadata={"path": rel},
        ) from exc
    except OSError as exc:
        raise _os_error(exc, rel) from exc
    _write(path, rel, data, create=True)
    return ToolResult(
        output=f"wrote {len(data)} bytes to {rel}",
        title=f"write {rel}",
        metadata={"path": rel, "bytes": len(data), "created": created},
    )


# --- edit_file ------------------------------------------------------------------------


@tool(
    name="edit_file",
    description=(
        "Edit a text file in the session's workspace by exact string replacement: 'old' "
        "must occur exactly once (include enough surrounding text to make it unique), or "
        "set 'replace_all' to replace every occurrence. Whitespace and line endings must "
        "match exactly."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": FILE_PATH,
            "old": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
            "new": {"type": "string", "description": "The replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one. Default false.",
            },
        },
        "required": ["path", "old", "new"],
        "additionalProperties": False,
    },
)
def edit_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    root = _root(ctx)
    old: str = args["old"]
    new: str = args["new"]
    replace_all = bool(args.get("replace_all", False))
    path = resolve_in_workspace(root, args["path"])
    rel = _rel(root, path)
    if old == new:
        raise ToolError("'old' and 'new' are identical; nothing to change", metadata={"path": rel})

    fd, st = _open_regular(path, rel, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(EDIT_MAX_BYTES + 1)
    if len(raw) > EDIT_MAX_BYTES:
        raise ToolError(
            f"{rel} is over the {_kib(EDIT_MAX_BYTES)} limit for edit_file",
            metadata={"path": rel, "bytes": max(st.st_size, len(raw))},
        )
    if _is_binary(raw):
        raise ToolError(
            f"{rel} is a binary file; edit_file only edits text", metadata={"path": rel}
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{rel} is not valid UTF-8 text; edit_file cannot change it safely",
            metadata={"path": rel},
        ) from exc

    occurrences = text.count(old)
    if occurrences == 0:
        raise ToolError(
            f"'old' was not found in {rel} (it must match exactly, including whitespace)",
            metadata={"path": rel, "occurrences": 0},
        )
    if occurrences > 1 and not replace_all:
        raise ToolError(
            f"'old' occurs {occurrences} times in {rel}; include more surrounding text to "
            "make it unique, or set replace_all to true",
            metadata={"path": rel, "occurrences": occurrences},
        )
    replaced = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    data = _encode(replaced, "the edited file")
    if len(data) > EDIT_MAX_BYTES:
        raise ToolError(
            f"the edited {rel} would be {len(data)} bytes, over the {_kib(EDIT_MAX_BYTES)} limit",
            metadata={"path": rel, "bytes": len(data)},
        )
    _write(path, rel, data, create=False)
    count = occurrences if replace_all else 1
    return ToolResult(
        output=f"replaced {count} occurrence{'s' if count != 1 else ''} in {rel}",
        title=f"edit {rel}",
        metadata={"path": rel, "replacements": count},
    )


# --- snapshots ------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """The state of a workspace: relative posix path -> sha256 hex digest.

    ``hash`` is the sha256 of the sorted (path, digest) pairs; an empty or missing
    workspace always has :data:`EMPTY_HASH`. ``truncated`` is set when the
    workspace had more than :data:`SNAPSHOT_MAX_FILES` files (the rest are absent).
    """

    hash: str
    files: dict[str, str] = field(default_factory=dict)
    truncated: bool = False


def _combined_hash(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(files[path].encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


EMPTY_HASH = _combined_hash({})


def _stat_digest(st: os.stat_result) -> str:
    return hashlib.sha256(f"stat\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()


def _content_digest(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        digest = hashlib.sha256()
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot(workspace: Path) -> Snapshot:
    """Fingerprint every file under ``workspace`` (blocking IO: run it in a thread).

    See the module docstring for the limits that keep this bounded.
    """
    files: dict[str, str] = {}
    truncated = False
    budget = SNAPSHOT_MAX_TOTAL_BYTES
    root = Path(workspace)
    if not root.is_dir():
        return Snapshot(hash=EMPTY_HASH, files={})

    # Breadth-first, each directory in sorted order: which files a cap leaves out is stable,
    # and shallow files are kept before a deep tree (say node_modules/) uses up the cap.
    queue: deque[tuple[str, str]] = deque([(str(root), "")])
    while queue and not truncated:
        directory, prefix = queue.popleft()
        subdirs: list[tuple[str, str]] = []
        for entry in _sorted_entries(directory):
            rel = prefix + entry.name
            try:
                is_link = entry.is_symlink()
                if not is_link and entry.is_dir(follow_symlinks=False):
                    subdirs.append((entry.path, rel + "/"))
                    continue
                if not is_link and not entry.is_file(follow_symlinks=False):
                    continue  # FIFO, socket, device: not workspace content
                if len(files) >= SNAPSHOT_MAX_FILES:
                    truncated = True
                    break
                if is_link:
                    target = os.readlink(entry.path)
                    digest = hashlib.sha256(
                        b"symlink\0" + target.encode("utf-8", "surrogateescape")
                    ).hexdigest()
                else:
                    st = entry.stat(follow_symlinks=False)
                    if st.st_size > SNAPSHOT_MAX_FILE_BYTES or st.st_size > budget:
                        digest = _stat_digest(st)
                    else:
                        budget -= st.st_size
                        try:
                            digest = _content_digest(entry.path)
                        except OSError:
                            digest = _stat_digest(st)
            except OSError:
                continue  # vanished or unreadable while walking
            files[rel] = digest
        queue.extend(subdirs)
    return Snapshot(hash=_combined_hash(files), files=files, truncated=truncated)


def changed_files(before: Snapshot, after: Snapshot) -> list[str]:
    """Paths added, modified or deleted between two snapshots, sorted."""
    paths = before.files.keys() | after.files.keys()
    return sorted(path for path in paths if before.files.get(path) != after.files.get(path))
