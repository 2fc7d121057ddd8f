"""Tool approvals over the AI SDK's chat route (ai 6 and 7).

A turn whose tool call a rule sends to ``ask`` is suspended: the reply's stream shows
the call (``tool-approval-request``, the approval id being the call id) and ends with
``finish{tool-calls}``; the message stays open. The client's
``addToolApprovalResponse`` marks the tool part ``approval-responded`` with
``approval: {id, approved, reason?}`` and, when ``sendAutomaticallyWhen`` says so
(``lastAssistantMessageIsCompleteWithApprovalResponses``), posts the chat again: the
same body as a prompt, but its last message is that *assistant* message. Such a
request is an answer, not a prompt: the responded calls still awaiting in the store
are answered together through the runtime's entry
(:func:`forge.runtime.approvals.services.answer_all`, which logs all the answers in
one transaction, or none, before anything runs, and goes on with the turn once, in
this process), and the answer streams the rest of the same message.

Which clients are sent the approval chunks: ai 5's stream schema rejects chunk types
it does not know, so a ``tool-approval-request`` would break its chat, and no request
of the AI SDK says which version sent it. A client declares that it speaks
approvals with the header ``X-Forge-Approvals: 1`` (or ``?approvals=1`` on the
history route); a request that answers approvals declares it by itself. Others see
an awaiting call as a tool with its input available, and a denial as a tool error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

from forge.errors import ApprovalNotFound
from sessions.ids import is_valid_id

from .chunks import is_awaiting

HEADER = "X-Forge-Approvals"
_YES = ("1", "true", "yes")


@dataclass(frozen=True)
class Answer:
    call_id: str
    approve: bool
    reason: str


def wanted(request: Request) -> bool:
    """Whether the client asked for the approval chunks and states (ai 6+)."""
    value = request.headers.get(HEADER) or request.query_params.get("approvals") or ""
    return value.strip().lower() in _YES


def is_answer(body: dict[str, Any]) -> bool:
    """A chat request whose last message is the assistant's: an approval answer."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    return messages[-1].get("role") == "assistant"


def answers_of(body: dict[str, Any]) -> tuple[str, list[Answer]]:
    """``(assistant message id, the answers)`` of an approval request; raises
    ``ValidationError`` (400) on a shape ``addToolApprovalResponse`` never sends."""
    message = body["messages"][-1]
    message_id = message.get("id")
    if not isinstance(message_id, str) or not is_valid_id(message_id):
        raise ValidationError({"messages": "the assistant message needs its id"})
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise ValidationError({"messages": "the last message has no parts"})
    answers: list[Answer] = []
    for part in parts:
        if not isinstance(part, dict) or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if not isinstance(approval, dict):
            raise ValidationError({"messages": "an approval-responded part needs 'approval'"})
        call_id, approved = approval.get("id"), approval.get("approved")
        reason = approval.get("reason")
        if not isinstance(call_id, str) or not call_id or not isinstance(approved, bool):
            raise ValidationError(
                {"messages": "'approval' is {id: string, approved: boolean, reason?: string}"}
            )
        if reason is not None and not isinstance(reason, str):
            raise ValidationError({"messages": "an approval's reason is a string"})
        if part.get("toolCallId") not in (None, call_id):
            raise ValidationError({"messages": "an approval's id is its tool call's id"})
        answers.append(Answer(call_id=call_id, approve=approved, reason=reason or ""))
    if not answers:
        raise ValidationError(
            {"messages": "the last message is the assistant's, with no approval response"}
        )
    return message_id, answers


def to_send(answers: list[Answer], parts: list[dict[str, Any]]) -> list[Answer]:
    """The answers for calls of the stored message that still await one. A client
    re-sends the responses it sent before (the parts keep their state until the
    stream moves them on), so those are skipped; when none is left the first is
    sent anyway, for the service's own refusal (409 answered). A call that is not a
    tool call of this message is refused here (404 ``approval_not_found``), before
    anything is logged: the service would find it elsewhere in the session, and the
    stream would follow a message that never goes on."""
    calls = {part.get("call_id") for part in parts if part.get("type") == "tool"}
    for answer in answers:
        if answer.call_id not in calls:
            raise ApprovalNotFound(
                f"no tool call {answer.call_id[:80]!r} waits in the message this request names"
            )
    waiting = {part.get("call_id") for part in parts if is_awaiting(part)}
    pending = [answer for answer in answers if answer.call_id in waiting]
    return pending or answers[:1]
