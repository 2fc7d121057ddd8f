"""Writing a summary boundary: the one place a compaction is logged.

:func:`record_compaction` is one unit of work: the compaction user message (its
``compaction`` part: ``auto``, ``overflow``, ``tail_start_id``), the summary
assistant message (``summary: true``, finished, its text part), and the
``session.compacted`` marker that lets the context read start at the boundary
(:func:`forge.context.visible_history`). A summary is recorded only once it
exists: a summary model that fails writes nothing. ``on_summary`` runs in the same
transaction with the completed summary as logged (the runtime counts its tokens and
cost in usage there: ``forge.usage``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from sessions import services
from sessions.ids import new_message_id
from sessions.log import format_time, now_ms
from sessions.models import Session


def record_compaction(
    session: Session,
    *,
    summary: str,
    auto: bool,
    overflow: bool,
    tail_start_id: str | None,
    model: str,
    agent: str = "",
    tokens: dict[str, int] | None = None,
    cost: float = 0.0,
    on_summary: Callable[[Mapping[str, Any]], Any] | None = None,
    speaker_id: int | None = None,
) -> dict[str, Any]:
    """Log a boundary; returns the marker ``{message_id, parent_id, tail_start_id, auto}``.
    ``tokens`` / ``cost``: what the summary model's call used and cost. ``speaker_id``:
    the user whose turn compacts (the summary's ``user_id``: usage bills the call to
    them; none, the session's owner)."""
    provider, _, model_name = model.partition("/")
    model_info = {"provider": provider, "model": model_name}
    user_id, summary_id = new_message_id(), new_message_id()
    now = format_time(now_ms())
    with transaction.atomic():
        services.update_message(
            session=session,
            info={"id": user_id, "role": "user", "agent": agent, "model": model_info},
        )
        services.update_part(
            session=session,
            part={
                "message_id": user_id,
                "type": "compaction",
                "auto": auto,
                "overflow": overflow,
                "tail_start_id": tail_start_id,
            },
        )
        services.update_message(
            session=session,
            info={
                "id": summary_id,
                "role": "assistant",
                "parent_id": user_id,
                "agent": agent,
                "model": model_info,
                "summary": True,
                **({} if speaker_id is None else {"user_id": speaker_id}),
            },
        )
        services.update_part(
            session=session,
            part={
                "message_id": summary_id,
                "type": "text",
                "text": summary,
                "time": {"start": now, "end": now},
            },
        )
        info: dict[str, Any] = {
            "id": summary_id,
            "finish": "stop",
            "completed_at": format_time(now_ms()),
        }
        if tokens:
            info["tokens"] = tokens
        if cost:
            info["cost"] = cost
        completed = services.update_message(session=session, info=info)
        if on_summary is not None:
            on_summary(completed.data)
        marker = {
            "message_id": summary_id,
            "parent_id": user_id,
            "tail_start_id": tail_start_id,
            "auto": auto,
        }
        services.append_event(session=session, type="session.compacted", data=marker)
    return marker
