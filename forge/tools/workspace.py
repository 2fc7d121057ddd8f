"""The four file tools of the per-session workspace (list, read, write, edit).

The tools only ever touch paths that ``forge.tools.sandbox`` accepts (relative
paths that stay inside the session's workspace; see there).

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
* ``edit_file``: files up to 1 MiB, before and after the edit (the size after is
  counted before the edited text is built); must be UTF-8 text.

Both write a new file beside the old one and rename it over it
(``sandbox.write_replacing``): a write that fails leaves the file as it was. Names
that are not UTF-8 are shown with U+FFFD (``sandbox.shown``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO

from .base import INT_ARG_MAX, ToolContext, ToolError, ToolResult
from .execute import MAX_OUTPUT_CHARS
from .registry import tool
from .sandbox import (
    open_regular,
    os_error,
    relative,
    resolve_in_workspace,
    shown,
    sorted_entries,
    stat_or_none,
    workspace_of,
    write_replacing,
)

LIST_MAX_ENTRIES = 1000
READ_MAX_BYTES = 256 * 1024
# Characters one read_file call returns, cut at a line end: below execute()'s output cap, so
# the continuation hint ("continue with offset=N") is never cut off.
READ_MAX_CHARS = MAX_OUTPUT_CHARS - 2_000
WRITE_MAX_BYTES = 1024 * 1024
EDIT_MAX_BYTES = WRITE_MAX_BYTES
BINARY_SNIFF_BYTES = 8192
_CHUNK = 1024 * 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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


FILE_PATH = {
    "type": "string",
    "minLength": 1,
    "description": "File path, relative to the workspace root.",
}


LINK_MARK = " (symbolic link)"  # after a listed link's name: not a file of its own


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
    root = workspace_of(ctx)
    requested = args.get("path") or "."
    directory = resolve_in_workspace(root, requested)
    rel_dir = relative(root, directory)
    st = stat_or_none(directory, rel_dir)
    if st is None:
        raise ToolError(f"no such directory: {rel_dir}", metadata={"path": rel_dir})
    if not stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{rel_dir} is not a directory; use read_file", metadata={"path": rel_dir})

    entries: list[str] = []
    truncated = False
    stack = [sorted_entries(str(directory))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        if len(entries) >= LIST_MAX_ENTRIES:
            truncated = True
            break
        rel = shown(Path(entry.path).relative_to(root).as_posix())
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_link = entry.is_symlink()
        except OSError:
            is_dir = is_link = False
        if is_dir:
            entries.append(rel + "/")
            stack.append(sorted_entries(entry.path))
        elif is_link:  # not followed; where it points is not shown (a path outside)
            entries.append(rel + LINK_MARK)
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
                "maximum": INT_ARG_MAX,
                "description": "Line number to start at (1-based).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": INT_ARG_MAX,
                "description": "How many lines to read.",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)
def read_file(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    root = workspace_of(ctx)
    path = resolve_in_workspace(root, args["path"])
    rel = relative(root, path)
    offset = int(args["offset"]) if args.get("offset") is not None else None
    limit = int(args["limit"]) if args.get("limit") is not None else None
    ranged = offset is not None or limit is not None

    start = offset or 1

    fd, st = open_regular(path, rel, os.O_RDONLY)
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
    if b"\x00" in data:  # past the sniffed head: binary too (the log stores no NUL)
        raise ToolError(
            f"{rel} is a binary file (a NUL byte past its first {_kib(BINARY_SNIFF_BYTES)}); "
            "read_file only reads text",
            metadata={"path": rel, "bytes": st.st_size},
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
    root = workspace_of(ctx)
    data = _encode(args["content"], "content")
    if len(data) > WRITE_MAX_BYTES:
        raise ToolError(
            f"content is {len(data)} bytes, over the {_kib(WRITE_MAX_BYTES)} limit",
            metadata={"bytes": len(data)},
        )
    requested: str = args["path"]
    path = resolve_in_workspace(root, requested)
    rel = relative(root, path)
    st = stat_or_none(path, rel)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{rel} is a directory", metadata={"path": rel})
    if requested.endswith("/"):  # resolving drops the slash: it made a file of the name
        raise ToolError(
            f"{requested!r} names a directory; give the path of a file", metadata={"path": rel}
        )
    created = st is None
    if created and _CONTROL.search(rel):
        # A newline in a name made list_files show two entries (QA).
        raise ToolError(
            f"{rel!r}: a new file's name holds no control character", metadata={"path": rel}
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise ToolError(
            f"cannot create {rel}: a parent of this path is a file, not a directory",
            metadata={"path": rel},
        ) from exc
    except OSError as exc:
        raise os_error(exc, rel) from exc
    write_replacing(path, rel, data, create=True)
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
    root = workspace_of(ctx)
    old: str = args["old"]
    new: str = args["new"]
    replace_all = bool(args.get("replace_all", False))
    path = resolve_in_workspace(root, args["path"])
    rel = relative(root, path)
    if old == new:
        raise ToolError("'old' and 'new' are identical; nothing to change", metadata={"path": rel})

    fd, st = open_regular(path, rel, os.O_RDONLY)
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
    count = occurrences if replace_all else 1
    # Its size first, from the counts: building the text of a 1 MiB file whose every
    # character is replaced by a long 'new' took GBs before the check (QA).
    size = len(raw) + count * (len(_encode(new, "new")) - len(old.encode("utf-8")))
    if size > EDIT_MAX_BYTES:
        raise ToolError(
            f"the edited {rel} would be {size} bytes, over the {_kib(EDIT_MAX_BYTES)} limit",
            metadata={"path": rel, "bytes": size},
        )
    replaced = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    data = _encode(replaced, "the edited file")
    write_replacing(path, rel, data, create=False)
    return ToolResult(
        output=f"replaced {count} occurrence{'s' if count != 1 else ''} in {rel}",
        title=f"edit {rel}",
        metadata={"path": rel, "replacements": count},
    )
