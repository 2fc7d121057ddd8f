"""Pruning: completed tool outputs older than a protected recent budget stop reaching
the model. Each is marked ``state.time.compacted`` by a logged part update; the
model then sees a short placeholder naming the tool and the part id
(:func:`placeholder`), and ``history_read`` brings the output back. The stored
output is never changed or removed.

The newest outputs, up to ``FORGE_PRUNE_PROTECT_TOKENS``, and everything of the
last ``PROTECTED_TURNS`` prompts stay; nothing is marked unless at least
``FORGE_PRUNE_MINIMUM_TOKENS`` would be saved (so a turn does not log a few
small updates every time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from sessions import services
from sessions.log import format_time, now_ms
from sessions.models import Session

from .tool_output import MODEL_OUTPUT_CHARS

PROTECTED_TURNS = 2


PLACEHOLDER_START = "[the output of the "


def placeholder(part: Mapping[str, Any]) -> str:
    return (
        f"{PLACEHOLDER_START}{part.get('tool')} call was pruned from the context to save "
        f"space; history_read with part_id {part.get('id')} shows it]"
    )


def is_pruned(part: Mapping[str, Any]) -> bool:
    state = part.get("state") or {}
    return bool(state.get("status") == "completed" and (state.get("time") or {}).get("compacted"))


def _tokens(part: Mapping[str, Any]) -> int:
    """What the output costs in the model's request: its projection, at most
    :data:`MODEL_OUTPUT_CHARS` (the log may hold far more)."""
    return min(len(str((part.get("state") or {}).get("output", ""))), MODEL_OUTPUT_CHARS) // 4


def is_candidate(part: Mapping[str, Any]) -> bool:
    """A completed tool part not pruned yet: what :func:`to_prune` may mark."""
    return (
        part.get("type") == "tool"
        and (part.get("state") or {}).get("status") == "completed"
        and not is_pruned(part)
    )


def candidate_tokens(parts: Sequence[Mapping[str, Any]]) -> int:
    """What the candidates among one message's ``parts`` cost the model. Summed over a
    history, a bound on what :func:`to_prune` can choose from it: under
    ``FORGE_PRUNE_MINIMUM_TOKENS``, nothing is chosen (the context cache keeps the sum,
    so a turn with no tool output to prune does not walk its history)."""
    return sum(_tokens(part) for part in parts if is_candidate(part))


def to_prune(
    history: Sequence[Mapping[str, Any]], *, protect: int, minimum: int
) -> list[Mapping[str, Any]]:
    """The completed, not yet pruned tool parts of ``history`` (what the model sees,
    oldest first) to mark: older than the last turns and than ``protect`` tokens of
    newer outputs; none unless they add up to ``minimum`` tokens."""
    turns = 0
    seen = 0
    chosen: list[Mapping[str, Any]] = []
    for item in reversed(history):
        if item["info"]["role"] == "user":
            turns += 1
            continue
        if turns < PROTECTED_TURNS:
            continue
        for part in reversed(item["parts"]):
            if not is_candidate(part):
                continue
            size = _tokens(part)
            seen += size
            if seen > protect:
                chosen.append(part)
    if sum(_tokens(part) for part in chosen) < minimum:
        return []
    return chosen


def choose(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """:func:`to_prune` with the settings' budgets."""
    return to_prune(
        history,
        protect=int(settings.FORGE_PRUNE_PROTECT_TOKENS),
        minimum=int(settings.FORGE_PRUNE_MINIMUM_TOKENS),
    )


def prune(session: Session, history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Mark what :func:`to_prune` chose from ``history`` (one unit of work); returns the
    part ids."""
    return mark(session, choose(history))


def mark(session: Session, chosen: Sequence[Mapping[str, Any]]) -> list[str]:
    """Mark ``chosen`` (parts of the visible history) pruned, in one unit of work;
    returns their ids."""
    if not chosen:
        return []  # before every step: no empty transaction
    now = format_time(now_ms())
    with transaction.atomic():
        for part in chosen:
            state = dict(part["state"])
            state["time"] = {**state["time"], "compacted": now}
            services.update_part(
                session=session,
                part={"id": part["id"], "message_id": part["message_id"], "state": state},
            )
    return [str(part["id"]) for part in chosen]
