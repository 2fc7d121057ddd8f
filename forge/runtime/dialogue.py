"""Where the runtime meets long-term memory (the seed's CommunicationProducer step).

* :func:`complete_reply`: a reply that finishes normally is completed (its last
  step's held parts and the message update, one batch) in one transaction
  with the append of that turn's user input and the assistant's
  final text (not reasoning, not tool output) to the dialogue window of the
  core of (tenant, user, agent). Aborted and failed replies never get here.
  A regenerated reply records its text only when the reply it replaces had
  recorded the prompt already (that one finished normally); the window is
  append-only, so the replaced answer stays in it.
* :func:`memory_blocks`: at the start of a turn, the core's current
  ``dialog_history`` block (or its removal), for ``set_blocks`` to log when it
  changed, so the model's view of memory is in the session's log and a request
  stays replayable from it.

Subtasks (a turn started by another turn's ``task`` tool) are the agent talking
to itself, not dialogue with the user: they are neither recorded nor given the
block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from memory import selectors as memory_selectors
from memory import services as memory_services
from sessions import selectors, services
from sessions.models import Session

from .turn import Turn


def _text(item: dict[str, Any]) -> str:
    parts = item["parts"]
    return "\n".join(
        p["text"] for p in parts if p["type"] == "text" and not p.get("synthetic") and p["text"]
    ).strip()


def complete_reply(turn: Turn, info: dict[str, Any], held: Sequence[services.Write] = ()) -> None:
    """Write the last step's ``held`` writes and the finished reply's message update
    (one batch), and record the exchange, atomically."""
    session = turn.session
    with transaction.atomic():
        services.append_batch(session=session, writes=[*held, services.UpdateMessage(info=info)])
        user = session.user
        if turn.depth or user is None:
            return
        tenant = session.tenant
        exchange = selectors.messages_by_id(
            tenant=tenant, session=session, message_ids=[turn.user_message_id, turn.message_id]
        )
        asked, answered = exchange[turn.user_message_id], exchange[turn.message_id]
        old = turn.supersedes
        recorded = old is not None and bool(old.get("completed_at")) and not old.get("error")
        messages = [
            {
                "role": item["info"]["role"],
                "text": text,
                "session_id": session.pk,
                "message_id": item["info"]["id"],
            }
            for item in ((answered,) if recorded else (asked, answered))
            if (text := _text(item))
        ]
        if messages:
            memory_services.append_dialogue(
                tenant=tenant, user=user, agent=turn.agent.name, messages=messages
            )


def memory_blocks(session: Session, agent: str, *, depth: int = 0) -> list[dict[str, Any]]:
    """The ``dialog_history`` block the turn's model should see: the core's current one,
    or a removal of any earlier one when the core has none."""
    user = session.user
    if depth or user is None:
        return []
    core = memory_selectors.find_core(tenant=session.tenant, user=user, agent=agent)
    block = (
        memory_selectors.dialog_history_block(tenant=session.tenant, core=core) if core else None
    )
    if block is None:
        return [{"kind": "dialog_history", "key": "memory", "removed": True}]
    return [block]
