"""The history the model sees at the log's end, read from the newest boundary on (or
from the rolled cut on, when that is newer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sessions import selectors
from sessions.models import Session
from sessions.projector import fold_context

from .compacted import filter_compacted, find_boundary
from .rolled import drop_rolled, is_generated, rolled_kept, rolled_through


def _behind(marker: Mapping[str, Any] | None, through: str | None) -> bool:
    """Whether the rolled cut ``through`` hides the whole of the boundary ``marker``
    names (its compaction message and its summary; the kept tail is older), so the
    read may start at the cut: what is older is hidden either way."""
    if not is_generated(through):
        return False
    if marker is None:
        return True
    ids = [marker.get("parent_id"), marker.get("message_id")]
    return all(is_generated(i) and str(i) <= str(through) for i in ids)


def read_history(
    session: Session, through: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """``(history, start)``: the messages read for the model's view, oldest first, and
    the id they were read from (None: the whole history was read).

    The read starts at the newest boundary that a ``session.compacted`` marker
    names (its kept tail, else its compaction message): what is older is never
    read, so the cost does not grow with the history behind the boundary. A
    marker whose boundary is gone (its messages removed) falls back to the
    whole history. When the rolled cut ``through`` (:mod:`forge.context.rolled`)
    hides that boundary too, or there is none, the read starts at the cut
    instead: a session that memory keeps rolling is read from its last rolled
    message on, however long it grows. Like the boundary's, this trusts the
    markers: a boundary is logged with its marker (``forge.context.boundary``).
    """
    tenant = session.tenant
    marker = selectors.last_compaction(tenant=tenant, session=session)
    if through is not None and _behind(marker, through):
        return list(selectors.iter_history(tenant=tenant, session_id=session.pk, since=through)), (
            through
        )
    start = None
    if marker is not None:
        ids = [marker.get("tail_start_id"), marker.get("parent_id")]
        start = min((str(i) for i in ids if i), default=None)
    history = list(selectors.iter_history(tenant=tenant, session_id=session.pk, since=start))
    if start is not None and not _is_marked_boundary(history, marker):
        return list(selectors.iter_history(tenant=tenant, session_id=session.pk)), None
    return history, start


def _is_marked_boundary(history: list[dict[str, Any]], marker: Mapping[str, Any] | None) -> bool:
    """Whether the newest boundary of ``history`` is the one ``marker`` names. When its
    summary was removed, an older boundary may still be in the read, but its kept tail
    can start before the read did: only the whole history holds it."""
    found = find_boundary(history)
    if found is None or marker is None:
        return False
    user, summary = found
    return history[user]["info"].get("id") == marker.get("parent_id") and history[summary][
        "info"
    ].get("id") == marker.get("message_id")


def visible_history(
    session: Session, blocks: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The history the model sees at the log's end: :func:`filter_compacted` of
    :func:`read_history`, then the rolled cut of the ``dialog_history`` block in
    force (``blocks``: the folded context blocks, read from the log when not given)."""
    if blocks is None:
        blocks = fold_context(selectors.context_updates(tenant=session.tenant, session=session))
    through, kept = rolled_through(blocks), rolled_kept(blocks)
    read = read_history(session, None if kept else through)[0]  # kept: older than the cut
    return drop_rolled(filter_compacted(read), through, kept)
