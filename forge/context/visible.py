"""The history the model sees at the log's end, read from the newest boundary on."""

from __future__ import annotations

from typing import Any

from sessions import selectors
from sessions.models import Session

from .compacted import filter_compacted, find_boundary


def read_history(session: Session) -> tuple[list[dict[str, Any]], str | None]:
    """``(history, start)``: the messages read for the model's view, oldest first, and
    the id they were read from (None: the whole history was read).

    The read starts at the newest boundary that a ``session.compacted`` marker
    names (its kept tail, else its compaction message): what is older is never
    read, so the cost does not grow with the history behind the boundary. A
    marker whose boundary is gone (its messages removed) falls back to the
    whole history.
    """
    tenant = session.tenant
    marker = selectors.last_compaction(tenant=tenant, session=session)
    start = None
    if marker is not None:
        ids = [marker.get("tail_start_id"), marker.get("parent_id")]
        start = min((str(i) for i in ids if i), default=None)
    history = list(selectors.iter_history(tenant=tenant, session_id=session.pk, since=start))
    if start is not None and find_boundary(history) is None:
        return list(selectors.iter_history(tenant=tenant, session_id=session.pk)), None
    return history, start


def visible_history(session: Session) -> list[dict[str, Any]]:
    """The history the model sees at the log's end (:func:`filter_compacted` of
    :func:`read_history`)."""
    return filter_compacted(read_history(session)[0])
