"""Context blocks as a workspace: the one entry that changes what the model is told
besides the conversation (the agent's prompt, tools and settings; memory's
``dialog_history``; anything a plugin adds).

A block is ``{"kind", "key", ...}``. :func:`set_blocks` logs a
``context.updated`` event carrying the blocks that differ from those in force,
and nothing when none does, so the log grows only when the model's view
changes. A block ``{"kind", "key", "removed": true}`` drops one. Blocks reach
the model only through the log (``request_for`` folds them), which is what
makes every request replayable from an exported log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection

from sessions import services, sql, turn_sql
from sessions.models import Session, SessionEvent
from sessions.projector import fold_context


def block_key(block: Mapping[str, Any]) -> str:
    return f"{block.get('kind')}:{block.get('key', '')}"


def blocks_in_force(session: Session) -> dict[str, dict[str, Any]]:
    """The session's context blocks in force, by :func:`block_key` (one plain statement:
    every prompt reads it, no ORM compile)."""
    with connection.cursor() as cursor:
        updates = turn_sql.context_updates(
            cursor, sql.Dialect(cursor), tenant_id=session.tenant_id, session_id=session.pk
        )
    return fold_context(updates)


def blocks_update(
    session: Session,
    blocks: Iterable[Mapping[str, Any]],
    *,
    current: Mapping[str, Mapping[str, Any]] | None = None,
) -> services.AppendEvent | None:
    """The ``context.updated`` write that logs the blocks changing what is in force, or
    None when none does (for a caller that appends it with other writes, in one batch).
    ``current``: the blocks in force, when the caller read them (:func:`blocks_in_force`)."""
    if current is None:
        current = blocks_in_force(session)
    changed: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block.get("kind"), str) or not block["kind"]:
            raise ValueError(f"a context block needs a kind: {dict(block)!r}")
        key = block_key(block)
        if block.get("removed"):
            if key in current:
                changed.append(
                    {"kind": block["kind"], "key": block.get("key", ""), "removed": True}
                )
        elif current.get(key) != dict(block):
            changed.append(dict(block))
    if not changed:
        return None
    return services.AppendEvent(type="context.updated", data={"blocks": changed})


def set_blocks(session: Session, blocks: Iterable[Mapping[str, Any]]) -> SessionEvent | None:
    """Log the blocks that change what is in force (one event), or nothing."""
    write = blocks_update(session, blocks)
    if write is None:
        return None
    return services.append_event(session=session, type=write.type, data=write.data)


def set_block(
    session: Session, *, kind: str, key: str, body: Mapping[str, Any]
) -> SessionEvent | None:
    """:func:`set_blocks` for one block ``{"kind": kind, "key": key, **body}``."""
    return set_blocks(session, [{"kind": kind, "key": key, **body}])
