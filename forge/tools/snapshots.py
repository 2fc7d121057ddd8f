"""Snapshots of a session's workspace: a hash per step (``step-start`` / ``step-finish``
parts) and the files a step changed (``patch`` parts).

A :func:`snapshot` takes: at most :data:`SNAPSHOT_MAX_FILES` (10,000) files (walking
  breadth-first in sorted order; the rest are left out and ``Snapshot.truncated``
  is set);
  files over :data:`SNAPSHOT_MAX_FILE_BYTES` (1 MiB), and every file once
  :data:`SNAPSHOT_MAX_TOTAL_BYTES` (64 MiB) of content has been hashed, are
  fingerprinted by size + mtime instead of content. Symlinks are fingerprinted
  by their target; FIFOs, sockets and devices are ignored.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .sandbox import O_NOFOLLOW, O_NONBLOCK, shown, sorted_entries

SNAPSHOT_MAX_FILES = 10_000
SNAPSHOT_MAX_FILE_BYTES = 1024 * 1024
SNAPSHOT_MAX_TOTAL_BYTES = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


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
    fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
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
        for entry in sorted_entries(directory):
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
    changed = (path for path in paths if before.files.get(path) != after.files.get(path))
    return sorted(shown(path) for path in changed)
