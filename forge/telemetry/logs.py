"""Structured logs: :class:`JsonFormatter` (``FORGE_LOG_FORMAT=json``, the default under
``forge.settings.production``) writes every record as one JSON object per line, and
:func:`turn_ended` writes the one line per turn end operators aggregate.

A record's ``forge`` extra (a dict) becomes top-level keys of its line. A turn's line
carries its session, tenant, agent, model, tokens, cost, latency and outcome, and
never the prompt's text (``FORGE_LOG_PROMPTS=1`` adds it).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

turns = logging.getLogger("forge.turns")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = getattr(record, "forge", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def turn_ended(
    *,
    session_id: str,
    tenant_id: int,
    message_id: str,
    agent: str,
    model: str,
    outcome: str,
    tokens: dict[str, int],
    cost: float,
    first_delta_ms: float | None,
    duration_ms: float,
    steps: int,
    prompt: str | None = None,
) -> None:
    """Log the end of a turn (``outcome``: ``finished``, ``failed``, ``aborted`` or
    ``suspended`` for one waiting on an approval)."""
    fields: dict[str, Any] = {
        "event": "turn.ended",
        "session_id": session_id,
        "tenant_id": tenant_id,
        "message_id": message_id,
        "agent": agent,
        "model": model,
        "outcome": outcome,
        "tokens": tokens,
        "cost": cost,
        "first_delta_ms": None if first_delta_ms is None else round(first_delta_ms, 1),
        "duration_ms": round(duration_ms, 1),
        "steps": steps,
    }
    if prompt is not None:
        fields["prompt"] = prompt
    turns.info(
        "turn %s of session %s %s in %.0f ms",
        message_id,
        session_id,
        outcome,
        duration_ms,
        extra={"forge": fields},
    )
