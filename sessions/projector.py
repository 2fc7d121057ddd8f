"""Messages and parts as projections of the log.

Two halves that must agree, and ``rebuild_projections --check`` proves they do:

* :func:`statements` says how one new event changes the projection tables
  (the live path: run in the transaction that appends the event);
* :func:`fold` computes, without touching the database, the rows a whole log
  projects to (used to rebuild the tables and to check them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import sql
from .log import in_canonical_order


class EventLike(Protocol):
    tenant_id: int
    session_id: str
    seq: int
    type: str
    data: Any


def statements(
    dialect: sql.Dialect,
    *,
    tenant_id: int,
    session_id: str,
    seq: int,
    type: str,
    data: dict[str, Any],
    data_json: str,
    at: Any,
) -> list[sql.Statement]:
    """The projection writes for one new event (``data_json`` is ``data``, canonical,
    no longer stored by the projection since rows point at their event; ``at`` its
    time, adapted for the database). Session and message events also
    record activity on the session (``updated_at``); part events, the bulk of a
    reply, touch only their part row."""
    if type == "message.updated":
        return [
            sql.touch_session(session_id=session_id, tenant_id=tenant_id, at=at),
            sql.upsert_message(
                dialect,
                message_id=data["id"],
                tenant_id=tenant_id,
                session_id=session_id,
                role=data["role"],
                seq=seq,
            ),
        ]
    if type == "part.updated":
        return [
            sql.upsert_part(
                dialect,
                part_id=data["id"],
                tenant_id=tenant_id,
                session_id=session_id,
                message_id=data["message_id"],
                type=data["type"],
                seq=seq,
            )
        ]
    if type in ("session.created", "session.updated"):
        return [
            sql.set_session_info(
                session_id=session_id,
                tenant_id=tenant_id,
                title=data.get("title") or "",
                agent=data.get("agent") or "",
                at=at,
            )
        ]
    if type == "message.removed":
        return sql.delete_message(
            session_id=session_id, tenant_id=tenant_id, message_id=data["message_id"]
        )
    if type == "part.removed":
        return [
            sql.delete_part(session_id=session_id, tenant_id=tenant_id, part_id=data["part_id"])
        ]
    # session.compacted and context.updated project to no rows: the model's
    # context (forge.context.derive_messages) reads them from the log.
    return []


@dataclass
class Projection:
    """The rows a log projects to, keyed by id. Row values mirror the model columns,
    plus ``data``: what the row reads through its event (``seq``)."""

    session: dict[str, Any] = field(default_factory=dict)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)


def fold(events: Iterable[EventLike]) -> Projection:
    state = Projection()
    for event in events:
        apply(state, event)
    return state


def apply(state: Projection, event: EventLike) -> None:
    data: dict[str, Any] = event.data
    if event.type in ("session.created", "session.updated"):
        state.session = {"title": data.get("title") or "", "agent": data.get("agent") or ""}
    elif event.type == "message.updated":
        state.messages[data["id"]] = {
            "tenant_id": event.tenant_id,
            "session_id": event.session_id,
            "role": data["role"],
            "data": data,
            "seq": event.seq,
        }
    elif event.type == "part.updated":
        state.parts[data["id"]] = {
            "tenant_id": event.tenant_id,
            "session_id": event.session_id,
            "message_id": data["message_id"],
            "type": data["type"],
            "data": data,
            "seq": event.seq,
        }
    elif event.type == "message.removed":
        message_id = data["message_id"]
        state.messages.pop(message_id, None)
        for part_id in [k for k, row in state.parts.items() if row["message_id"] == message_id]:
            del state.parts[part_id]
    elif event.type == "part.removed":
        state.parts.pop(data["part_id"], None)


def compare(expected: Projection, actual: Projection) -> list[str]:
    """Human-readable differences between two projections (empty when equal)."""
    problems: list[str] = []
    if expected.session != actual.session:
        problems.append(f"session: expected {expected.session}, found {actual.session}")
    for kind, want, have in (
        ("message", expected.messages, actual.messages),
        ("part", expected.parts, actual.parts),
    ):
        for row_id in sorted(want.keys() - have.keys()):
            problems.append(f"{kind} {row_id}: missing")
        for row_id in sorted(have.keys() - want.keys()):
            problems.append(f"{kind} {row_id}: not in the log")
        for row_id in sorted(want.keys() & have.keys()):
            if want[row_id] != have[row_id]:
                fields = sorted(k for k in want[row_id] if want[row_id][k] != have[row_id].get(k))
                problems.append(f"{kind} {row_id}: differs in {', '.join(fields)}")
    return problems


def fold_context(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The context blocks in force after these ``context.updated`` events (their ``data``).

    A block is ``{"kind", "key", ...}``; a later block of the same kind and key
    replaces the earlier one, and ``"removed": true`` drops it. The result is
    keyed ``"kind:key"``, in the order the blocks were first set. Like the
    message and part projections, it is a fold of the log and nothing else.
    """
    blocks: dict[str, dict[str, Any]] = {}
    for data in events:
        apply_context(blocks, data)
    return blocks


def apply_context(blocks: dict[str, dict[str, Any]], data: Mapping[str, Any]) -> None:
    """Fold one ``context.updated`` event's ``data`` into ``blocks`` (in place)."""
    for block in data.get("blocks", []):
        key = f"{block.get('kind')}:{block.get('key', '')}"
        if block.get("removed"):
            blocks.pop(key, None)
        else:
            blocks[key] = in_canonical_order(block)  # the same on every engine


ROLLED_BLOCK = ("dialog_history", "memory")  # memory's block: kind and key


def rolled_through_moved(
    blocks: Iterable[Mapping[str, Any]], new_ids: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Memory's ``dialog_history`` block with its ``rolled_through`` (the newest message
    its summaries stand for) named in the copy's ids: the copy's newest message whose
    original is at or before it (``new_ids``: original id -> copy's id, both in creation
    order). Left as it was, it named the original's message, older than every copied
    one, so the copy showed the rolled turns raw and summarized at once. The messages it
    keeps in view below the cut (``rolled_kept``: other agents' and speakers') are named
    in the copy's ids too, those not copied left out."""
    moved = []
    for block in blocks:
        through = block.get("rolled_through")
        if (block.get("kind"), block.get("key")) != ROLLED_BLOCK or not isinstance(through, str):
            continue
        covered = [original for original in new_ids if original <= through]
        cut = new_ids[max(covered)] if covered else None
        renamed = {**block, "rolled_through": cut}
        renamed.pop("rolled_kept", None)
        kept = block.get("rolled_kept")
        if cut is not None and isinstance(kept, list):
            copies = [new_ids[k] for k in kept if isinstance(k, str) and k in new_ids]
            if copies:
                renamed["rolled_kept"] = copies
        moved.append(renamed)
    return moved


def with_rolled_through_moved(
    blocks: Iterable[Mapping[str, Any]], new_ids: Mapping[str, str]
) -> list[Mapping[str, Any]]:
    """``blocks`` (a ``context.updated`` event's) as a copy logs them: the
    ``dialog_history`` block's cut moved by :func:`rolled_through_moved`, the rest as
    they are."""
    blocks = list(blocks)
    moved = {(b.get("kind"), b.get("key")): b for b in rolled_through_moved(blocks, new_ids)}
    return [moved.get((b.get("kind"), b.get("key")), b) for b in blocks]
