"""Closing a reply that did not end normally (an abort, or a crashed process).

The same rules either way: open text and reasoning parts are written with the
text that had streamed (trailing white space trimmed), pending and running tool
parts end in ``error`` with ``metadata.interrupted``, and the message gets
``completed_at`` and a ``MessageAbortedError``. No reply stays open, no tool
stays running.

A tool call awaiting approval is where the two causes part. After a crash the
reply is suspended, not broken: the approval is durable and outlives the process,
so the call keeps waiting and the reply stays open for its answer. After a user's
abort (``deny_waiting``) the user has asked the reply to stop: each waiting call is
denied first (as a denial records it, reason ``aborted``), so the reply completes
as aborted and no answer can start another step after the stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction

from forge import hooks
from forge.runtime import accounting
from forge.runtime.approvals.pending import AWAITING, EXPIRED, SYSTEM, denied_state, is_expired
from sessions import selectors, services
from sessions.log import format_time, now_ms
from sessions.models import Session

logger = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the process running this reply stopped"
SHUT_DOWN = "interrupted: the server shut down"  # a SIGTERM's grace ran out


def message_error(
    name: str, message: str, *, retryable: bool = False, status: int | None = None
) -> dict[str, Any]:
    """A message's ``error`` (CONTRACT §2): ``{name, message, retryable}``, and the
    provider's HTTP ``status`` when there is one. The one place it is built."""
    error: dict[str, Any] = {"name": name, "message": message, "retryable": bool(retryable)}
    if status is not None:
        error["status"] = status
    return error


def aborted_error(message: str) -> dict[str, Any]:
    return message_error("MessageAbortedError", message)


@transaction.atomic
def finalize_open_messages(
    *,
    session: Session,
    reason: str,
    error: dict[str, Any] | None = None,
    texts: Mapping[str, str] | None = None,
    message_id: str | None = None,
    agent: str = "",
    deny_waiting: str | None = None,
    billed: bool = True,
    cut_step_end: Mapping[str, Any] | None = None,
    estimate_cut: Callable[[Mapping[str, Any], Mapping[str, str]], Any] | None = None,
) -> list[str]:
    """Finalize unfinished assistant messages of the session (or just ``message_id``).

    Open parts are closed as the module says, tools interrupted with ``reason``;
    the message gets ``completed_at`` and ``error`` (default: a
    ``MessageAbortedError`` saying ``reason``), and ``finish: "error"`` unless that is
    an abort. ``texts`` gives the streamed text
    of parts still open (from the in-flight buffer); without it, an open part
    keeps the text it has in the store. Returns the ids finalized.

    A message with calls awaiting approval stays open (crash recovery, an import),
    unless ``deny_waiting`` is given (a user's abort): those calls are then denied
    with that reason (``expired`` when overdue, as every denial), ``by`` the system,
    and the message is finalized like any other. A waiting call of a step that never
    finished (no ``step-finish`` after it: the process died in the middle of the model's
    stream) is denied so too, with ``reason``: approved, it ran with the next step as if
    its step had succeeded (QA), where a model error there denies it
    (``steps._fail``).

    ``billed``: whether each ending is counted (usage, turn metrics), as every reply
    this server ran is. False for an import's ending of the replies its log left open:
    they ran elsewhere, and usage counts only this server's model calls.

    ``cut_step_end``: the ``step-finish`` of a step the model was streaming when its
    turn was stopped (``Processor.cut_step_end``), logged once that message's open
    parts are closed, before its completion (which bills it).

    ``estimate_cut``: for a reply that no ``cut_step_end`` names, given the reply (as
    read, before its parts are closed) and ``texts``, the ``step-finish`` of the step
    it left unfinished, or None (recovery's: ``recovery.dead_step_end``).
    """
    texts = texts or {}
    finished: list[str] = []
    now = format_time(now_ms())
    for item in selectors.open_assistant_messages(tenant=session.tenant, session=session):
        info = item["info"]
        if message_id is not None and info["id"] != message_id:
            continue
        waits = False
        cut_end = (
            cut_step_end if cut_step_end and cut_step_end["message_id"] == info["id"] else None
        )
        if cut_end is None and estimate_cut is not None:
            cut_end = estimate_cut(item, texts)
        unfinished = _in_unfinished_step(item["parts"])
        for part in item["parts"]:
            if _awaits(part) and (deny_waiting is not None or part["id"] in unfinished):
                why = deny_waiting if deny_waiting is not None else reason
                why = EXPIRED if is_expired(part, now) else why
                denied = denied_state(part, reason=why, at=now, by=SYSTEM)
                services.update_part(session=session, part={"id": part["id"], "state": denied})
                continue
            waits = waits or _awaits(part)
            _close_part(
                session, part, reason=reason, text=texts.get(part["id"]), now=now, agent=agent
            )
        if cut_end is not None:
            written = services.update_part(session=session, part=dict(cut_end))
            item = {**item, "parts": [*item["parts"], written.data]}
        if waits:
            # A reply whose calls await an answer is suspended, not broken: it stays
            # open for the answer (forge.runtime.approvals), from any process, later.
            continue
        ending = error or aborted_error(reason)
        completion: dict[str, Any] = {
            "id": info["id"],
            "completed_at": now,
            "error": ending,
            **_steps_usage(item["parts"]),
        }
        if ending.get("name") != "MessageAbortedError":
            completion["finish"] = "error"  # a failure (an abort keeps its last finish)
        completed = services.update_message(session=session, info=completion)
        if billed:
            accounting.reply_completed(session=session, info=completed.data)
        finished.append(info["id"])
    return finished


def _steps_usage(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The message's ``tokens`` (its last step's) and ``cost`` (its steps' sum) from its
    step-finish parts. A step's update of the message is written once its calls have
    run, so a reply ended during a call (an abort, a crash) had logged the step's usage
    in its step-finish only: with no usage of its own yet, the message said nothing of
    it; with its earlier steps', its cost said less than was billed (review)."""
    finishes = [p for p in parts if p["type"] == "step-finish"]
    if not finishes:
        return {}
    return {
        "tokens": finishes[-1].get("tokens", {}),
        "cost": round(sum(float(p.get("cost") or 0) for p in finishes), 10),
    }


def _close_part(
    session: Session,
    part: Mapping[str, Any],
    *,
    reason: str,
    text: str | None,
    now: str,
    agent: str,
) -> None:
    if part["type"] in ("text", "reasoning") and not part.get("time", {}).get("end"):
        final = (part["text"] if text is None else text).rstrip()
        if part["type"] == "text":
            context = hooks.TextContext(
                session_id=session.pk,
                message_id=part["message_id"],
                part_id=part["id"],
                agent=agent,
            )
            try:
                final = hooks.text_complete(final, context)
            except (Exception, SystemExit, KeyboardInterrupt):
                # Closing must not fail: the reply may be failing because of this hook.
                logger.exception("a text_complete hook failed; the text is kept as it was")
        start = part.get("time", {}).get("start") or now
        services.update_part(
            session=session,
            part={"id": part["id"], "text": final, "time": {"start": start, "end": now}},
        )
    elif part["type"] == "tool" and part["state"]["status"] in ("pending", "running"):
        state = part["state"]
        start = state.get("time", {}).get("start") or now
        services.update_part(
            session=session,
            part={
                "id": part["id"],
                "state": {
                    "status": "error",
                    "input": state.get("input", {}),
                    "error": reason,
                    "metadata": {**state.get("metadata", {}), "interrupted": True},
                    "time": {"start": start, "end": now},
                },
            },
        )


def unfinished_step_start(parts: list[dict[str, Any]]) -> int | None:
    """The index of a reply's last ``step-start`` when no ``step-finish`` follows it: the
    start of a step whose end was never logged; else None."""
    last_start = last_finish = -1
    for index, part in enumerate(parts):
        if part["type"] == "step-start":
            last_start = index
        elif part["type"] == "step-finish":
            last_finish = index
    return last_start if last_start > last_finish else None


def _in_unfinished_step(parts: list[dict[str, Any]]) -> set[str]:
    """The ids of the parts of a step whose end was never logged (:func:`unfinished_step_start`)."""
    start = unfinished_step_start(parts)
    return set() if start is None else {part["id"] for part in parts[start + 1 :]}


def _awaits(part: Mapping[str, Any]) -> bool:
    return part["type"] == "tool" and part["state"].get("status") == AWAITING
