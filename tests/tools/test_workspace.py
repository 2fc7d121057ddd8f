from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from forge.tools import (
    Snapshot,
    ToolContext,
    ToolError,
    changed_files,
    resolve_in_workspace,
    snapshot,
    snapshots,
    workspace_path,
)
from forge.tools import workspace as ws
from forge.tools.execute import MAX_OUTPUT_CHARS
from forge.tools.snapshots import EMPTY_HASH

from . import call, make_context


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("top secret\n")
    return directory


@pytest.fixture
def ctx(root: Path) -> ToolContext:
    root.mkdir()
    return make_context(root)


async def refused(name: str, args: dict[str, Any], ctx: ToolContext) -> ToolError:
    with pytest.raises(ToolError) as info:
        await call(name, args, ctx)
    return info.value


# --- workspace_path ---------------------------------------------------------------------


def test_workspace_path_is_created_under_the_root(tmp_path: Path, settings: Any) -> None:
    settings.FORGE_WORKSPACE_ROOT = tmp_path / "workspaces"
    path = workspace_path("ses_01ABC", tenant_id=7)
    assert path == tmp_path / "workspaces" / "t7" / "ses_01ABC"
    assert path.is_dir()
    assert workspace_path("ses_01ABC", tenant_id=7) == path  # idempotent
    # Another tenant's session with the same id names another directory.
    assert workspace_path("ses_01ABC", tenant_id=8, create=False) != path


@pytest.mark.parametrize(
    "session_id", ["", ".", "..", "../x", "a/b", "a b", "a\n", "x" * 65, "ses.1", None]
)
def test_workspace_path_refuses_bad_session_ids(
    tmp_path: Path, settings: Any, session_id: Any
) -> None:
    settings.FORGE_WORKSPACE_ROOT = tmp_path / "workspaces"
    with pytest.raises(ValueError, match="invalid session id"):
        workspace_path(session_id, tenant_id=1)
    assert not (tmp_path / "workspaces").exists()


# --- resolve_in_workspace ---------------------------------------------------------------


def test_resolve_accepts_paths_inside(root: Path) -> None:
    root.mkdir()
    (root / "sub").mkdir()
    real = root.resolve()
    assert resolve_in_workspace(root, "a.txt") == real / "a.txt"
    assert resolve_in_workspace(root, "./sub/../b.txt") == real / "b.txt"
    assert resolve_in_workspace(root, "sub/new/deep.txt") == real / "sub" / "new" / "deep.txt"
    assert resolve_in_workspace(root, ".") == real


def test_resolve_follows_symlinks_that_stay_inside(root: Path) -> None:
    root.mkdir()
    (root / "real").mkdir()
    (root / "alias").symlink_to("real")
    assert resolve_in_workspace(root, "alias/x.txt") == root.resolve() / "real" / "x.txt"


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("", "path is empty"),
        ("   ", "path is empty"),
        ("a\0b", "NUL byte"),
        ("/etc/passwd", "is absolute"),
        ("../x", "escapes the workspace"),
        ("..", "escapes the workspace"),
        ("a/../../x", "escapes the workspace"),
        ("link/secret.txt", "leads outside the workspace"),
        ("leak.txt", "leads outside the workspace"),
    ],
)
def test_resolve_refuses(root: Path, outside: Path, relative: str, message: str) -> None:
    root.mkdir()
    (root / "link").symlink_to(outside)
    (root / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match=message):
        resolve_in_workspace(root, relative)


def test_resolve_refuses_a_relative_symlink_climbing_out(root: Path, outside: Path) -> None:
    root.mkdir()
    (root / "up").symlink_to("../outside")
    with pytest.raises(ToolError, match="leads outside"):
        resolve_in_workspace(root, "up/secret.txt")


def test_resolve_refuses_a_symlink_loop(root: Path) -> None:
    root.mkdir()
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    with pytest.raises(ToolError):
        resolve_in_workspace(root, "a/x")


# --- list_files -------------------------------------------------------------------------


async def test_list_files_is_recursive_and_sorted(ctx: ToolContext, root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (root / "src" / "main.py").write_text("")
    (root / "README.md").write_text("hi")
    (root / "empty").mkdir()

    result = await call("list_files", {}, ctx)

    assert result.output.splitlines() == [
        "README.md",
        "empty/",
        "src/",
        "src/main.py",
        "src/pkg/",
        "src/pkg/mod.py",
    ]
    assert result.title == "list ."
    assert result.metadata == {"count": 6, "truncated": False}


async def test_list_files_of_a_subdirectory(ctx: ToolContext, root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("")
    (root / "other.txt").write_text("")
    result = await call("list_files", {"path": "src"}, ctx)
    assert result.output == "src/pkg/\nsrc/pkg/mod.py"
    assert result.title == "list src"


async def test_list_files_of_an_empty_or_new_workspace(tmp_path: Path) -> None:
    fresh = tmp_path / "never-created"
    result = await call("list_files", {"path": "."}, make_context(fresh))
    assert result.output == "(empty directory)"
    assert result.metadata["count"] == 0
    assert fresh.is_dir()  # created on first use


async def test_list_files_stops_at_the_limit(ctx: ToolContext, root: Path) -> None:
    for i in range(ws.LIST_MAX_ENTRIES + 5):
        (root / f"f{i:04d}").write_text("")
    result = await call("list_files", {}, ctx)
    lines = result.output.splitlines()
    assert len(lines) == ws.LIST_MAX_ENTRIES + 1
    assert lines[0] == "f0000"
    assert lines[-1].startswith("[listing truncated at 1000 entries")
    assert result.metadata == {"count": 1000, "truncated": True}


async def test_list_files_does_not_follow_symlinks(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    (root / "inner").mkdir()
    (root / "inner" / "x.txt").write_text("")
    (root / "alias").symlink_to("inner")
    (root / "link").symlink_to(outside)
    result = await call("list_files", {}, ctx)
    # A link says so (QA: a link to a folder looked like a file, and the model could
    # not tell why reading through it failed); where it points is not shown.
    assert result.output.splitlines() == [
        "alias (symbolic link)",
        "inner/",
        "inner/x.txt",
        "link (symbolic link)",
    ]
    assert "secret" not in result.output
    assert str(outside) not in result.output


async def test_list_files_refusals(ctx: ToolContext, root: Path, outside: Path) -> None:
    (root / "file.txt").write_text("")
    (root / "link").symlink_to(outside)
    assert "escapes" in (await refused("list_files", {"path": "../"}, ctx)).message
    assert "absolute" in (await refused("list_files", {"path": "/etc"}, ctx)).message
    assert "outside" in (await refused("list_files", {"path": "link"}, ctx)).message
    assert (await refused("list_files", {"path": "nope"}, ctx)).message == (
        "no such directory: nope"
    )
    assert "not a directory" in (await refused("list_files", {"path": "file.txt"}, ctx)).message
    assert "Additional properties" in (await refused("list_files", {"depth": 2}, ctx)).message


# --- read_file --------------------------------------------------------------------------


async def test_read_file_returns_the_text(ctx: ToolContext, root: Path) -> None:
    (root / "notes").mkdir()
    (root / "notes" / "a.txt").write_bytes("héllo\r\nworld".encode())
    result = await call("read_file", {"path": "./notes/a.txt"}, ctx)
    assert result.output == "héllo\r\nworld"
    assert result.title == "read notes/a.txt"
    assert result.metadata == {
        "path": "notes/a.txt",
        "bytes": 13,
        "offset": 1,
        "lines": 2,
        "truncated": False,
    }


async def test_read_file_of_an_empty_file(ctx: ToolContext, root: Path) -> None:
    (root / "empty.txt").write_text("")
    result = await call("read_file", {"path": "empty.txt"}, ctx)
    assert result.output == ""
    assert result.metadata["lines"] == 0


async def test_read_file_shows_invalid_utf8_with_replacement(ctx: ToolContext, root: Path) -> None:
    (root / "latin1.txt").write_bytes(b"caf\xe9\n")
    assert (await call("read_file", {"path": "latin1.txt"}, ctx)).output == "caf\ufffd\n"


async def test_read_file_line_ranges(ctx: ToolContext, root: Path) -> None:
    (root / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))

    result = await call("read_file", {"path": "lines.txt", "offset": 3, "limit": 2}, ctx)
    assert result.output == "line 3\nline 4\n"
    assert result.title == "read lines.txt"
    assert result.metadata["offset"] == 3
    assert result.metadata["lines"] == 2
    assert result.metadata["truncated"] is False

    result = await call("read_file", {"path": "lines.txt", "offset": 9}, ctx)
    assert result.output == "line 9\nline 10\n"
    result = await call("read_file", {"path": "lines.txt", "limit": 1}, ctx)
    assert result.output == "line 1\n"
    result = await call("read_file", {"path": "lines.txt", "offset": 10, "limit": 5}, ctx)
    assert result.output == "line 10\n"


async def test_read_file_range_without_a_final_newline(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("one\ntwo\nthree")
    result = await call("read_file", {"path": "a.txt", "offset": 3}, ctx)
    assert result.output == "three"
    assert result.metadata["lines"] == 1
    error = await refused("read_file", {"path": "a.txt", "offset": 4}, ctx)
    assert error.message == "offset 4 is past the end of a.txt"


async def test_read_file_offset_past_the_end(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("one\ntwo\n")
    for offset in (3, 50):
        error = await refused("read_file", {"path": "a.txt", "offset": offset}, ctx)
        assert error.message == f"offset {offset} is past the end of a.txt"


async def test_read_file_skips_long_lines_in_bounded_pieces(
    ctx: ToolContext, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws, "_CHUNK", 4)
    (root / "long.txt").write_text("a" * 10 + "\n" + "b" * 9 + "\n" + "abcd\nlast")
    result = await call("read_file", {"path": "long.txt", "offset": 3}, ctx)
    assert result.output == "abcd\nlast"
    result = await call("read_file", {"path": "long.txt", "offset": 2, "limit": 1}, ctx)
    assert result.output == "b" * 9 + "\n"
    error = await refused("read_file", {"path": "long.txt", "offset": 5}, ctx)
    assert "past the end" in error.message


async def test_read_file_refuses_a_large_file_without_a_range(ctx: ToolContext, root: Path) -> None:
    line = "x" * 99 + "\n"
    (root / "big.log").write_text(line * 3000)  # 300,000 bytes > 256 KiB
    error = await refused("read_file", {"path": "big.log"}, ctx)
    assert error.message == (
        "big.log is 300000 bytes, over the 256 KiB limit for a whole file; "
        "read a line range with 'offset' and 'limit'"
    )

    result = await call("read_file", {"path": "big.log", "offset": 2001, "limit": 3}, ctx)
    assert result.output == line * 3


async def test_read_file_returns_a_long_read_in_pieces(ctx: ToolContext, root: Path) -> None:
    line = "y" * 99 + "\n"
    (root / "big.log").write_text(line * 3000)
    per_call = ws.READ_MAX_CHARS // len(line)

    result = await call("read_file", {"path": "big.log", "offset": 1}, ctx)
    body, marker = result.output.rsplit("\n[", 1)
    assert body == line * per_call
    assert marker == f"truncated: showing lines 1-{per_call}; continue with offset={per_call + 1}]"
    assert len(result.output) < MAX_OUTPUT_CHARS  # execute() leaves it alone
    assert "output_chars" not in result.metadata
    assert result.metadata["truncated"] is True
    assert result.metadata["lines"] == per_call

    result = await call("read_file", {"path": "big.log", "offset": per_call + 1}, ctx)
    assert result.output.startswith(line * per_call)
    assert f"continue with offset={2 * per_call + 1}]" in result.output


async def test_read_file_of_a_medium_file_comes_in_pieces(ctx: ToolContext, root: Path) -> None:
    line = "z" * 49 + "\n"
    (root / "medium.txt").write_text(line * 2000)  # 100,000 bytes: under 256 KiB
    result = await call("read_file", {"path": "medium.txt"}, ctx)
    per_call = ws.READ_MAX_CHARS // len(line)
    assert result.output.endswith(f"continue with offset={per_call + 1}]")
    result = await call("read_file", {"path": "medium.txt", "offset": 2 * per_call + 1}, ctx)
    assert result.output == line * (2000 - 2 * per_call)
    assert result.metadata["truncated"] is False


async def test_read_file_range_stops_at_the_byte_limit(
    ctx: ToolContext, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws, "READ_MAX_BYTES", 25)
    (root / "a.txt").write_text("0123456789\n" * 5)
    result = await call("read_file", {"path": "a.txt", "offset": 2}, ctx)
    assert result.output == "0123456789\n0123456789\n012" + (
        "\n[truncated: showing lines 2-3; continue with offset=4]"
    )
    assert result.metadata["lines"] == 2


async def test_read_file_of_one_huge_line(ctx: ToolContext, root: Path) -> None:
    (root / "min.js").write_text("x" * (ws.READ_MAX_CHARS + 10))
    result = await call("read_file", {"path": "min.js"}, ctx)
    assert result.output.startswith("x" * ws.READ_MAX_CHARS + "\n[truncated: line 1 is too long")
    assert result.metadata["lines"] == 0
    assert result.metadata["truncated"] is True


async def test_read_file_refuses_binary_files(ctx: ToolContext, root: Path) -> None:
    (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    error = await refused("read_file", {"path": "image.png"}, ctx)
    assert error.message == "image.png is a binary file (16 bytes); read_file only reads text"
    error = await refused("read_file", {"path": "image.png", "offset": 1}, ctx)
    assert "binary" in error.message


async def test_read_file_refusals(ctx: ToolContext, root: Path, outside: Path) -> None:
    (root / "dir").mkdir()
    (root / "link").symlink_to(outside)
    (root / "leak.txt").symlink_to(outside / "secret.txt")

    for path in ("../outside/secret.txt", "/etc/passwd", "link/secret.txt", "leak.txt"):
        error = await refused("read_file", {"path": path}, ctx)
        assert "secret" not in error.message.replace(path, "")
        assert any(word in error.message for word in ("escapes", "absolute", "outside"))
    assert (await refused("read_file", {"path": "missing.txt"}, ctx)).message == (
        "no such file or directory: missing.txt"
    )
    assert (await refused("read_file", {"path": "dir"}, ctx)).message == (
        "dir is a directory; use list_files"
    )
    assert "'path' is a required property" in (await refused("read_file", {}, ctx)).message
    error = await refused("read_file", {"path": "a", "offset": 0}, ctx)
    assert "offset: 0 is less than the minimum of 1" in error.message


async def test_read_file_refuses_a_fifo_without_hanging(ctx: ToolContext, root: Path) -> None:
    os.mkfifo(root / "pipe")
    assert (await refused("read_file", {"path": "pipe"}, ctx)).message == (
        "pipe is not a regular file"
    )


# --- write_file -------------------------------------------------------------------------


async def test_write_file_creates_parents(ctx: ToolContext, root: Path) -> None:
    result = await call("write_file", {"path": "a/b/c.txt", "content": "héllo\n"}, ctx)
    assert (root / "a" / "b" / "c.txt").read_bytes() == "héllo\n".encode()
    assert result.output == "wrote 7 bytes to a/b/c.txt"
    assert result.title == "write a/b/c.txt"
    assert result.metadata == {"path": "a/b/c.txt", "bytes": 7, "created": True}


async def test_write_file_replaces_an_existing_file(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("a much longer old content\n")
    result = await call("write_file", {"path": "a.txt", "content": ""}, ctx)
    assert (root / "a.txt").read_text() == ""
    assert result.output == "wrote 0 bytes to a.txt"
    assert result.metadata["created"] is False


async def test_write_file_into_a_fresh_workspace(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    await call("write_file", {"path": "x.txt", "content": "x"}, make_context(fresh))
    assert (fresh / "x.txt").read_text() == "x"


async def test_write_file_refuses_too_much_content(ctx: ToolContext, root: Path) -> None:
    content = "é" * (ws.WRITE_MAX_BYTES // 2 + 1)  # fewer characters than bytes
    error = await refused("write_file", {"path": "big.txt", "content": content}, ctx)
    assert error.message == f"content is {ws.WRITE_MAX_BYTES + 2} bytes, over the 1 MiB limit"
    assert not (root / "big.txt").exists()
    # Exactly at the limit is fine.
    await call("write_file", {"path": "big.txt", "content": "x" * ws.WRITE_MAX_BYTES}, ctx)
    assert (root / "big.txt").stat().st_size == ws.WRITE_MAX_BYTES


async def test_write_file_refusals(ctx: ToolContext, root: Path, outside: Path) -> None:
    (root / "dir").mkdir()
    (root / "file.txt").write_text("")
    (root / "link").symlink_to(outside)
    (root / "leak.txt").symlink_to(outside / "secret.txt")

    absolute = str(root.parent / "x.txt")
    for path in ("../x.txt", absolute, "link/new.txt", "leak.txt"):
        error = await refused("write_file", {"path": path, "content": "pwned"}, ctx)
        assert any(word in error.message for word in ("escapes", "absolute", "outside"))
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (root.parent / "x.txt").exists()

    assert (await refused("write_file", {"path": "dir", "content": ""}, ctx)).message == (
        "dir is a directory"
    )
    error = await refused("write_file", {"path": "file.txt/child.txt", "content": ""}, ctx)
    assert error.message == (
        "cannot create file.txt/child.txt: a parent of this path is a file, not a directory"
    )
    error = await refused("write_file", {"path": "file.txt/a/b.txt", "content": ""}, ctx)
    assert "a parent of this path is a file" in error.message
    error = await refused("write_file", {"path": "x.txt"}, ctx)
    assert "'content' is a required property" in error.message
    error = await refused("write_file", {"path": "x.txt", "content": "", "mode": "a"}, ctx)
    assert "Additional properties" in error.message


async def test_write_file_refuses_lone_surrogates(ctx: ToolContext, root: Path) -> None:
    """Refused as the call's input, before the tool runs (the log could not store that
    input either); the tool's own check (``content is not valid Unicode text``) stays
    behind it."""
    error = await refused("write_file", {"path": "x.txt", "content": "a\ud800b"}, ctx)
    assert error.message.startswith(
        "invalid input for write_file: arguments.content holds a lone surrogate"
    )
    assert not (root / "x.txt").exists()


# --- edit_file --------------------------------------------------------------------------


async def test_edit_file_replaces_one_occurrence(ctx: ToolContext, root: Path) -> None:
    (root / "code.py").write_text("def f():\n    return 1\n")
    result = await call("edit_file", {"path": "code.py", "old": "return 1", "new": "return 2"}, ctx)
    assert (root / "code.py").read_text() == "def f():\n    return 2\n"
    assert result.output == "replaced 1 occurrence in code.py"
    assert result.title == "edit code.py"
    assert result.metadata == {"path": "code.py", "replacements": 1}


async def test_edit_file_replace_all(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("cat cat dog cat")
    result = await call(
        "edit_file", {"path": "a.txt", "old": "cat", "new": "cow", "replace_all": True}, ctx
    )
    assert (root / "a.txt").read_text() == "cow cow dog cow"
    assert result.output == "replaced 3 occurrences in a.txt"
    assert result.metadata["replacements"] == 3
    # replace_all with a single occurrence is fine too.
    result = await call(
        "edit_file", {"path": "a.txt", "old": "dog", "new": "", "replace_all": True}, ctx
    )
    assert (root / "a.txt").read_text() == "cow cow  cow"
    assert result.metadata["replacements"] == 1


async def test_edit_file_keeps_line_endings(ctx: ToolContext, root: Path) -> None:
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    await call("edit_file", {"path": "crlf.txt", "old": "two", "new": "2"}, ctx)
    assert (root / "crlf.txt").read_bytes() == b"one\r\n2\r\n"


async def test_edit_file_not_found_or_ambiguous(ctx: ToolContext, root: Path) -> None:
    (root / "a.txt").write_text("x = 1\nx = 1\n")
    error = await refused("edit_file", {"path": "a.txt", "old": "y = 2", "new": "y = 3"}, ctx)
    assert error.message.startswith("'old' was not found in a.txt")
    assert error.metadata["occurrences"] == 0

    error = await refused("edit_file", {"path": "a.txt", "old": "x = 1", "new": "x = 2"}, ctx)
    assert error.message.startswith("'old' occurs 2 times in a.txt")
    assert "replace_all" in error.message
    assert error.metadata["occurrences"] == 2

    assert (root / "a.txt").read_text() == "x = 1\nx = 1\n"


async def test_edit_file_refusals(ctx: ToolContext, root: Path, outside: Path) -> None:
    (root / "a.txt").write_text("abc")
    (root / "bin").write_bytes(b"ab\x00c")
    (root / "latin1.txt").write_bytes(b"caf\xe9")
    (root / "leak.txt").symlink_to(outside / "secret.txt")

    error = await refused("edit_file", {"path": "a.txt", "old": "abc", "new": "abc"}, ctx)
    assert "identical" in error.message
    error = await refused("edit_file", {"path": "a.txt", "old": "", "new": "x"}, ctx)
    assert "old: '' should be non-empty" in error.message
    error = await refused("edit_file", {"path": "missing.txt", "old": "a", "new": "b"}, ctx)
    assert error.message == "no such file or directory: missing.txt"
    error = await refused("edit_file", {"path": "bin", "old": "ab", "new": "xy"}, ctx)
    assert error.message == "bin is a binary file; edit_file only edits text"
    error = await refused("edit_file", {"path": "latin1.txt", "old": "caf", "new": "x"}, ctx)
    assert "not valid UTF-8" in error.message
    for path in ("../outside/secret.txt", "/etc/passwd", "leak.txt"):
        error = await refused("edit_file", {"path": path, "old": "top", "new": "no"}, ctx)
        assert any(word in error.message for word in ("escapes", "absolute", "outside"))
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_edit_file_size_limits(
    ctx: ToolContext, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ws, "EDIT_MAX_BYTES", 10)
    (root / "big.txt").write_text("x" * 11)
    error = await refused("edit_file", {"path": "big.txt", "old": "x", "new": "y"}, ctx)
    assert "over the" in error.message
    (root / "small.txt").write_text("abc")
    error = await refused("edit_file", {"path": "small.txt", "old": "b", "new": "b" * 20}, ctx)
    assert error.message.startswith("the edited small.txt would be 22 bytes")
    assert (root / "small.txt").read_text() == "abc"


async def test_edit_file_refuses_an_oversized_edit_before_building_it(
    ctx: ToolContext, root: Path
) -> None:
    """Its size comes from the counts: the edited text of a 1 MiB file whose every
    character becomes 300 was built (300 MB) before the check (QA)."""
    import tracemalloc

    (root / "a.txt").write_text("a" * (1024 * 1024))
    tracemalloc.start()
    try:
        error = await refused(
            "edit_file", {"path": "a.txt", "old": "a", "new": "x" * 300, "replace_all": True}, ctx
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.message.startswith(f"the edited a.txt would be {1024 * 1024 * 300} bytes")
    assert peak < 20 * 1024 * 1024, peak


@pytest.fixture
def file_size_limit() -> Any:
    """``limit(n)``: writes past ``n`` bytes of a file fail (``EFBIG``), as on a full
    disk; this process only, until the test ends."""
    import resource
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def limit(size: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))

    yield limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, handler)


async def test_a_failed_write_leaves_the_file_as_it_was(
    ctx: ToolContext, root: Path, file_size_limit: Any
) -> None:
    """An edit or a write that fails part-way (a full disk) leaves the old content,
    and nothing half-written beside it (QA: the file was cut off, its text gone)."""
    original = "important line\n" * 4000  # 60,000 bytes
    (root / "a.txt").write_text(original)
    file_size_limit(100_000)
    error = await refused(
        "edit_file",
        {"path": "a.txt", "old": "line", "new": "line, now longer", "replace_all": True},
        ctx,
    )
    error_new = await refused("write_file", {"path": "new.txt", "content": "x" * 150_000}, ctx)
    file_size_limit(10**9)
    assert error.message.startswith("a.txt: File too large")
    assert error_new.message.startswith("new.txt: File too large")
    assert (root / "a.txt").read_text() == original
    assert sorted(p.name for p in root.iterdir()) == ["a.txt"]


async def test_a_write_through_a_hard_link_leaves_the_other_name_alone(
    ctx: ToolContext, root: Path, outside: Path
) -> None:
    """A name in the workspace that is a hard link to a file elsewhere (planted from
    outside: the model cannot make one) gets a file of its own (QA: the write went
    through to the file outside)."""
    os.link(outside / "secret.txt", root / "hard")
    await call("write_file", {"path": "hard", "content": "PWNED"}, ctx)
    await call("edit_file", {"path": "hard", "old": "PWNED", "new": "again"}, ctx)
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert (root / "hard").read_text() == "again"


async def test_writes_keep_a_files_mode_and_give_a_new_one_0644(
    ctx: ToolContext, root: Path
) -> None:
    (root / "run.sh").write_text("echo hi\n")
    (root / "run.sh").chmod(0o755)
    await call("edit_file", {"path": "run.sh", "old": "hi", "new": "there"}, ctx)
    await call("write_file", {"path": "new.txt", "content": "x"}, ctx)
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o755
    assert (root / "new.txt").stat().st_mode & 0o777 == 0o644


async def test_a_name_that_is_not_utf8_is_listed_and_changed_as_text(
    ctx: ToolContext, root: Path
) -> None:
    """A file name in Latin-1 (an archive unpacked by another tool) shows as U+FFFD: it
    failed the listing, and the reply's patch part, which the log refuses (QA)."""
    before = snapshot(root)
    with open(os.path.join(os.fsencode(root), b"bad\xffname.txt"), "wb") as f:
        f.write(b"x")
    result = await call("list_files", {}, ctx)
    assert result.output == "bad\ufffdname.txt"
    assert changed_files(before, snapshot(root)) == ["bad\ufffdname.txt"]


async def test_errors_name_the_path_as_given_never_the_servers(
    ctx: ToolContext, root: Path
) -> None:
    """A name too long, a loop of links: the message showed the workspace's absolute
    path (the root, the tenant's number) to the model and the history (QA)."""
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    long = "a" * 300
    errors = [
        await refused("write_file", {"path": long, "content": "x"}, ctx),
        await refused("list_files", {"path": long}, ctx),
        await refused("read_file", {"path": long}, ctx),
        await refused("read_file", {"path": "loop1"}, ctx),
    ]
    for error in errors:
        assert str(root) not in error.message, error.message
        assert "/ws" not in error.message.replace(long, ""), error.message
    assert errors[0].message == f"{long}: File name too long"
    assert errors[3].message.startswith("cannot resolve path 'loop1': ")


async def test_write_file_refuses_a_directory_path_and_control_characters(
    ctx: ToolContext, root: Path
) -> None:
    """``newdir/`` made a file called ``newdir``; a newline in a new name made
    list_files show two entries (QA)."""
    error = await refused("write_file", {"path": "newdir/", "content": "x"}, ctx)
    assert error.message == "'newdir/' names a directory; give the path of a file"
    error = await refused("write_file", {"path": "evil\nfake.txt", "content": "x"}, ctx)
    assert "control character" in error.message
    assert list(root.iterdir()) == []


async def test_read_file_refuses_a_nul_past_the_sniffed_head(ctx: ToolContext, root: Path) -> None:
    """Refused as binary, not "tool 'read_file' failed: result.output holds a NUL" (QA)."""
    (root / "late.txt").write_bytes(b"a" * 9000 + b"\x00tail")
    error = await refused("read_file", {"path": "late.txt"}, ctx)
    assert error.message.startswith("late.txt is a binary file (a NUL byte past its first")


# --- snapshots --------------------------------------------------------------------------

EMPTY = hashlib.sha256(b"").hexdigest()


def test_snapshot_of_an_empty_or_missing_workspace_is_stable(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "subdir").mkdir()
    missing = snapshot(tmp_path / "missing")
    empty = snapshot(tmp_path / "empty")
    assert missing == empty == Snapshot(hash=EMPTY, files={})
    assert EMPTY_HASH == EMPTY


def test_snapshot_maps_paths_to_content_digests(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_bytes(b"print(1)\n")
    (tmp_path / "a.txt").write_bytes(b"")
    snap = snapshot(tmp_path)
    assert snap.files == {
        "a.txt": hashlib.sha256(b"").hexdigest(),
        "src/main.py": hashlib.sha256(b"print(1)\n").hexdigest(),
    }
    expected = hashlib.sha256()
    for path in sorted(snap.files):
        expected.update(f"{path}\0{snap.files[path]}\n".encode())
    assert snap.hash == expected.hexdigest()
    assert snap.truncated is False
    assert snapshot(tmp_path) == snap  # deterministic


def test_snapshot_is_frozen(tmp_path: Path) -> None:
    snap = snapshot(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.hash = "x"  # type: ignore[misc]


def test_changed_files_added_modified_deleted(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("same")
    (tmp_path / "edit.txt").write_text("before")
    (tmp_path / "gone.txt").write_text("bye")
    before = snapshot(tmp_path)

    (tmp_path / "edit.txt").write_text("after")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "file.txt").write_text("hi")
    after = snapshot(tmp_path)

    assert changed_files(before, after) == ["edit.txt", "gone.txt", "new/file.txt"]
    assert changed_files(after, before) == ["edit.txt", "gone.txt", "new/file.txt"]
    assert changed_files(before, before) == []
    assert before.hash != after.hash


def test_rewriting_the_same_content_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("same")
    before = snapshot(tmp_path)
    (tmp_path / "a.txt").write_text("same")
    after = snapshot(tmp_path)
    assert after == before
    assert changed_files(before, after) == []


def test_large_files_are_fingerprinted_by_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshots, "SNAPSHOT_MAX_FILE_BYTES", 8)
    big = tmp_path / "big.bin"
    big.write_bytes(b"0123456789")
    os.utime(big, ns=(1_000_000_000, 1_000_000_000))
    first = snapshot(tmp_path)
    assert first.files["big.bin"] != hashlib.sha256(b"0123456789").hexdigest()

    big.write_bytes(b"abcdefghij")  # same size, same mtime: not noticed (documented)
    os.utime(big, ns=(1_000_000_000, 1_000_000_000))
    assert snapshot(tmp_path) == first

    os.utime(big, ns=(2_000_000_000, 2_000_000_000))
    assert changed_files(first, snapshot(tmp_path)) == ["big.bin"]


def test_the_total_byte_budget_falls_back_to_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshots, "SNAPSHOT_MAX_TOTAL_BYTES", 5)
    (tmp_path / "a.txt").write_bytes(b"1234")
    (tmp_path / "b.txt").write_bytes(b"5678")
    snap = snapshot(tmp_path)
    assert snap.files["a.txt"] == hashlib.sha256(b"1234").hexdigest()
    assert snap.files["b.txt"] != hashlib.sha256(b"5678").hexdigest()


def test_the_number_of_files_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshots, "SNAPSHOT_MAX_FILES", 4)
    (tmp_path / "d" / "deeper").mkdir(parents=True)
    for name in ("a", "c", "d/b", "d/e", "d/deeper/x", "f"):
        (tmp_path / name).write_text(name)
    snap = snapshot(tmp_path)
    # Breadth-first: shallow files first, then the next level, in sorted order.
    assert sorted(snap.files) == ["a", "c", "d/b", "f"]
    assert snap.truncated is True
    assert snapshot(tmp_path) == snap

    monkeypatch.setattr(snapshots, "SNAPSHOT_MAX_FILES", 6)
    full = snapshot(tmp_path)
    assert len(full.files) == 6
    assert full.truncated is False


def test_snapshot_fingerprints_symlinks_without_following(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "link").symlink_to(outside)
    os.mkfifo(root / "pipe")
    snap = snapshot(root)
    assert list(snap.files) == ["link"]
    (outside / "secret.txt").write_text("changed")
    assert snapshot(root) == snap
    (root / "link").unlink()
    (root / "link").symlink_to(outside / "secret.txt")
    assert changed_files(snap, snapshot(root)) == ["link"]


async def test_tools_and_snapshots_together(ctx: ToolContext, root: Path) -> None:
    before = snapshot(root)
    await call("write_file", {"path": "app/main.py", "content": "print('hi')\n"}, ctx)
    await call("edit_file", {"path": "app/main.py", "old": "hi", "new": "hello"}, ctx)
    after = snapshot(root)
    assert changed_files(before, after) == ["app/main.py"]
    assert after.files["app/main.py"] == hashlib.sha256(b"print('hello')\n").hexdigest()
