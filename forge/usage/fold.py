"""The usage rule, as pure functions: what one completed reply adds, and what a whole
log adds (the same rule, folded over the events, for ``rebuild_usage``).

A reply counts once, when its assistant message goes from open (logged without
``completed_at``) to completed. It counts on the UTC day its message was created,
for the user who spoke (its ``user_id``; the session's owner for replies logged
before speakers were; none, and it counts nowhere, when that owner is gone), its
agent and its model (``provider/model``). It adds:

* one turn; ``failed`` when it ended with an error, ``aborted`` when that error is
  ``MessageAbortedError`` (an aborted reply is not also failed);
* its steps (``step-finish`` parts), their tokens and their cost;
* its tool calls (``tool`` parts).

A compaction's summary (an assistant message with ``summary: true``, logged open and
completed in one transaction) is no reply: it adds no turn and no step, only the
tokens and cost of the summary model's call, which its completion carries
(``tokens``, ``cost``), to the row of its agent and model (``FORGE_SMALL_MODEL``).

A message first logged already completed (a fork's copy) never counts: it ran
nowhere. Parts logged after the completion do not count either.

Usage counts only what this server's model calls cost. What a session's log copied
from elsewhere (an import, a fork: the events through the session's
``copied_through`` seq) is billed nothing, whatever its step-finish parts claim (a
hand-made log claimed 10^12 tokens and used up its tenant's budget): a completion
logged through that seq counts nothing, and a reply completed after it (one the import
left awaiting an approval, which then ran on here) counts only the parts logged after
it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

ABORTED = "MessageAbortedError"
TOKEN_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write")


@dataclass(frozen=True)
class Key:
    user_id: int
    agent: str
    model: str
    day: dt.date


@dataclass
class Totals:
    turns: int = 0
    steps: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_FIELDS, 0))
    cost: Decimal = Decimal(0)
    failed: int = 0
    aborted: int = 0
    tool_calls: int = 0

    def add(self, other: Totals) -> None:
        self.turns += other.turns
        self.steps += other.steps
        for name in TOKEN_FIELDS:
            self.tokens[name] += other.tokens[name]
        self.cost += other.cost
        self.failed += other.failed
        self.aborted += other.aborted
        self.tool_calls += other.tool_calls


def model_name(model: Any) -> str:
    if isinstance(model, Mapping):
        return f"{model.get('provider', '')}/{model.get('model', '')}"
    return ""


def _day(created_at: str) -> dt.date:
    return dt.datetime.fromisoformat(created_at.replace("Z", "+00:00")).astimezone(dt.UTC).date()


def key_of(info: Mapping[str, Any], *, owner_id: int | None) -> Key | None:
    """The row a reply counts in; None when no user is known (a reply logged before
    speakers were, in a session whose owner was deleted): it counts nowhere."""
    user_id = info.get("user_id")
    user = int(user_id) if isinstance(user_id, int) else owner_id
    if user is None:
        return None
    return Key(
        user_id=user,
        agent=str(info.get("agent") or ""),
        model=model_name(info.get("model")),
        day=_day(str(info["created_at"])),
    )


def _completes(existing: Mapping[str, Any] | None, info: Mapping[str, Any]) -> bool:
    return (
        info.get("role") == "assistant"
        and existing is not None
        and not existing.get("completed_at")
        and bool(info.get("completed_at"))
    )


def completes(existing: Mapping[str, Any] | None, info: Mapping[str, Any]) -> bool:
    """Whether logging ``info`` over the stored ``existing`` completes a reply (a
    compaction's summary is no reply: :func:`completes_summary`)."""
    return not info.get("summary") and _completes(existing, info)


def completes_summary(existing: Mapping[str, Any] | None, info: Mapping[str, Any]) -> bool:
    """Whether logging ``info`` over the stored ``existing`` completes a compaction's
    summary."""
    return bool(info.get("summary")) and _completes(existing, info)


def summary_totals(info: Mapping[str, Any]) -> Totals:
    """What the completed summary ``info`` adds: its call's tokens and cost."""
    totals = Totals()
    tokens = info.get("tokens") or {}
    for name in TOKEN_FIELDS:
        totals.tokens[name] += int(tokens.get(name, 0))
    totals.cost = Decimal(str(info.get("cost", 0)))
    return totals


def reply_totals(info: Mapping[str, Any], parts: Iterable[Mapping[str, Any]]) -> Totals:
    """What the completed reply ``info`` with ``parts`` (as logged before its completion)
    adds."""
    totals = Totals(turns=1)
    error = info.get("error")
    if error:
        if error.get("name") == ABORTED:
            totals.aborted = 1
        else:
            totals.failed = 1
    for part in parts:
        kind = part.get("type")
        if kind == "step-finish":
            totals.steps += 1
            tokens = part.get("tokens") or {}
            for name in TOKEN_FIELDS:
                totals.tokens[name] += int(tokens.get(name, 0))
            totals.cost += Decimal(str(part.get("cost", 0)))
        elif kind == "tool":
            totals.tool_calls += 1
    return totals


def fold_log(
    events: Iterable[Mapping[str, Any]],
    *,
    owner_id: int | None,
    copied_through: int | None = None,
) -> list[tuple[Key, Totals]]:
    """The completions a session's log holds, in log order: the rule above applied to
    its ``message.updated`` and ``part.updated`` / ``part.removed`` events.
    ``copied_through``: the session's, the seq through which its log was copied here
    (nothing logged through it is billed; the events then need their ``seq``)."""
    messages: dict[str, Mapping[str, Any]] = {}
    # message id -> part id -> (copied, part): the part as last logged, and whether
    # that was by the copy
    parts: dict[str, dict[str, tuple[bool, Mapping[str, Any]]]] = {}
    part_message: dict[str, str] = {}
    found: list[tuple[Key, Totals]] = []
    for event in events:
        kind, data = event["type"], event["data"]
        copy = bool(copied_through) and int(event["seq"]) <= int(copied_through or 0)
        if kind == "message.updated":
            existing = messages.get(data["id"])
            if copy:
                pass  # copied, not run here: billed nothing
            elif completes(existing, data):
                key = key_of(data, owner_id=owner_id)
                if key is not None:
                    logged = parts.get(data["id"], {}).values()
                    ran = [part for copied, part in logged if not copied]
                    found.append((key, reply_totals(data, ran)))
            elif completes_summary(existing, data):
                key = key_of(data, owner_id=owner_id)
                if key is not None:
                    found.append((key, summary_totals(data)))
            messages[data["id"]] = data
        elif kind == "part.updated":
            parts.setdefault(data["message_id"], {})[data["id"]] = (copy, data)
            part_message[data["id"]] = data["message_id"]
        elif kind == "part.removed":
            message_id = part_message.pop(data["part_id"], None)
            if message_id is not None:
                parts.get(message_id, {}).pop(data["part_id"], None)
        elif kind == "message.removed":
            messages.pop(data["message_id"], None)
            for part_id in parts.pop(data["message_id"], {}):
                part_message.pop(part_id, None)
    return found
