"""What a completed reply is counted in: the usage table (in the transaction that
completes it) and, once that commits, the turn counters, the reply latency histogram
and the turn-end log line.

Every write that completes a reply calls :func:`reply_completed` with the message as
logged (the event's data): the normal end (``dialogue.complete_reply``), a failure,
abort or recovery (``finalize.finalize_open_messages``), a denial that ends a
suspended reply (``approvals.pending.deny_all``). The caller knows the reply was open
until this write: that is the usage rule (``forge.usage.fold``), applied here without
re-reading the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction

from accounts.times import parse_time
from forge.telemetry import logs, metrics
from forge.usage import services as usage
from forge.usage.fold import ABORTED
from sessions.models import Part, Session

from .agents import FALLBACK


def outcome_of(info: dict[str, Any]) -> str:
    error = info.get("error")
    if not error:
        return "finished"
    return "aborted" if error.get("name") == ABORTED else "failed"


def reply_completed(
    *,
    session: Session,
    info: dict[str, Any],
    parts: Iterable[dict[str, Any]] | None = None,
    first_delta_at: float | None = None,
    started_at: float | None = None,
) -> None:
    """Count the reply ``info`` just completed (inside the completing transaction).
    ``started_at`` / ``first_delta_at``: this process's monotonic clock, when the turn
    ran here (the log line's first-delta time; the histograms use the log's times).
    ``parts``: the reply's parts, when the caller has just read them (else one read)."""
    totals = usage.record_reply(session=session, info=info, parts=parts)
    steps = totals.steps if totals is not None else 0
    agent = str(info.get("agent") or "")
    model = metrics.model_label(info.get("model"))
    # Ended by no turn of this process (an import, a recovery, an abort's or a denial's
    # ending): the labels are what the log says, so only configured names are kept.
    if started_at is None:
        agent, model = bounded_labels(agent, model)
    outcome = outcome_of(info)
    seconds = (parse_time(info["completed_at"]) - parse_time(info["created_at"])).total_seconds()
    tokens = info.get("tokens") or {}
    first_ms = None
    if first_delta_at is not None and started_at is not None:
        first_ms = (first_delta_at - started_at) * 1000
    prompt = _prompt_text(session, info) if settings.FORGE_LOG_PROMPTS else None

    def counted() -> None:
        counter = {
            "finished": metrics.TURNS_FINISHED,
            "failed": metrics.TURNS_FAILED,
            "aborted": metrics.TURNS_ABORTED,
        }[outcome]
        counter.labels(agent=agent, model=model).inc()
        metrics.REPLY_SECONDS.labels(agent=agent, model=model).observe(max(0.0, seconds))
        logs.turn_ended(
            session_id=session.pk,
            tenant_id=session.tenant_id,
            message_id=info["id"],
            agent=agent,
            model=model,
            outcome=outcome,
            tokens={k: v for k, v in tokens.items() if v},
            cost=float(info.get("cost") or 0),
            first_delta_ms=first_ms,
            duration_ms=seconds * 1000,
            steps=steps,
            prompt=prompt,
        )

    transaction.on_commit(counted)


OTHER = "other"  # the label of an agent or a model that this server does not configure


def bounded_labels(agent: str, model: str) -> tuple[str, str]:
    """``agent`` and ``model`` as metric labels: themselves when this server configures
    them (an agent row, or the fallback; ``FORGE_MODEL``, ``FORGE_SMALL_MODEL``, an
    agent's model, a priced model), else :data:`OTHER`. A reply completed here for a log
    this process did not run names what the log says: an imported log can say anything,
    and each new name was a new series of every turn metric (QA: some 17 series an import)."""
    from forge.models import Agent

    rows = list(Agent.objects.values_list("name", "model"))
    agents = {name for name, _ in rows} | {FALLBACK.name}
    models = {m for _, m in rows if m} | {settings.FORGE_MODEL, settings.FORGE_SMALL_MODEL}
    models |= set(getattr(settings, "FORGE_MODEL_PRICES", {}) or {})
    return (
        agent if agent in agents or not agent else OTHER,
        model if model in models or model in ("", "/") else OTHER,
    )


def _prompt_text(session: Session, info: dict[str, Any]) -> str | None:
    """The text of the prompt the reply answers (only read when FORGE_LOG_PROMPTS)."""
    parent = info.get("parent_id")
    if not parent:
        return None
    texts = Part.objects.filter(
        tenant_id=session.tenant_id, message_id=parent, type="text"
    ).values_list("data", flat=True)
    return "\n".join(str(data.get("text", "")) for data in texts)
