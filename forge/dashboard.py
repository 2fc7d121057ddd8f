"""What the operators' dashboard (the admin's index page) shows: reads only, for the
tenants the operator may see (``tenant_ids``; None: every tenant, for a superuser),
over the ``days`` UTC days up to today.

Costs and turns per day, top users and agents, failures come from the usage table
(a fold of the logs, forge.usage). Latency comes from the newest ``LATENCY_SAMPLE``
completed replies in the period: a reply's whole time is its message's
``completed_at`` minus its ``created_at``; its first delta's, the start of its first
text or reasoning part minus ``created_at``. Streaming now: the live session
leases. Pending approvals: tool parts awaiting an answer. Overdue rolling: memory
cores whose dialogue window is due (over the threshold, or idle), the longest
waiting first.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import F, Q, QuerySet, Sum
from django.utils import timezone

from forge.models import NANOS, PendingApproval, SessionLease, Usage
from memory.models import MemoryCore
from sessions.log import parse_time
from sessions.models import Message, Part

LATENCY_SAMPLE = 1000  # replies whose latency is measured
RECENT_FAILURES = 10
TOP = 5


@dataclass
class Day:
    day: dt.date
    turns: int = 0
    cost: Decimal = Decimal(0)


@dataclass
class Dashboard:
    start: dt.date
    end: dt.date
    days: list[Day]
    turns: int
    cost: Decimal
    failed: int
    aborted: int
    top_users: list[dict[str, Any]]
    top_agents: list[dict[str, Any]]
    recent_failures: list[dict[str, Any]]
    latency: dict[str, float | None]
    streaming: list[dict[str, Any]]
    pending_approvals: int
    overdue_cores: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failure_rate(self) -> float | None:
        return None if not self.turns else self.failed / self.turns


def _scoped(queryset: QuerySet[Any], tenant_ids: Sequence[int] | None, path: str) -> Any:
    return queryset if tenant_ids is None else queryset.filter(**{f"{path}__in": tenant_ids})


def _cost(nanos: int | None) -> Decimal:
    return Decimal(nanos or 0) / NANOS


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _replies_run_here(tenant_ids: Sequence[int] | None) -> Any:
    """The assistant messages this server wrote last: not those an import or a fork
    copied (logged through their session's ``copied_through``), which ran elsewhere and
    say whatever their file says (an imported log's failures and latencies were shown
    as this server's)."""
    replies = Message.objects.filter(role="assistant").filter(
        Q(session__copied_through__isnull=True) | Q(seq__gt=F("session__copied_through"))
    )
    return _scoped(replies, tenant_ids, "tenant_id")


def _latency(tenant_ids: Sequence[int] | None, start: dt.datetime) -> dict[str, float | None]:
    replies = _replies_run_here(tenant_ids)
    rows = list(
        replies.order_by("-id").values_list("id", "data", "session__created_at")[:LATENCY_SAMPLE]
    )
    created: dict[str, dt.datetime] = {}
    whole: list[float] = []
    for message_id, data, session_began in rows:
        if not data.get("completed_at") or data.get("error") or data.get("summary"):
            continue  # unfinished, failed, or a compaction's summary (no turn)
        began = parse_time(data["created_at"])
        if began < start or began < session_began:
            continue  # before the period, or a fork's copy (it keeps its reply's times)
        took = (parse_time(data["completed_at"]) - began).total_seconds()
        if took < 0:
            # Times a plugin wrote through the store (contract §6), not a turn's own: a
            # reply "completed" before it began put a negative p50 on the page (QA).
            continue
        created[message_id] = began
        whole.append(took)
    first: dict[str, float] = {}
    parts = Part.objects.filter(message_id__in=list(created), type__in=("text", "reasoning"))
    for message_id, data in parts.values_list("message_id", "data"):
        begun = (data.get("time") or {}).get("start")
        if begun:
            seconds = (parse_time(begun) - created[message_id]).total_seconds()
            if seconds >= 0:
                first[message_id] = min(seconds, first.get(message_id, seconds))
    firsts = list(first.values())
    return {
        "replies": float(len(whole)),
        "first_p50": _percentile(firsts, 50),
        "first_p99": _percentile(firsts, 99),
        "reply_p50": _percentile(whole, 50),
        "reply_p99": _percentile(whole, 99),
    }


def _overdue(tenant_ids: Sequence[int] | None, now: dt.datetime) -> list[dict[str, Any]]:
    idle_since = now - dt.timedelta(seconds=settings.FORGE_MEMORY_IDLE_AFTER)
    due = MemoryCore.objects.filter(window_count__gt=0).filter(
        Q(window_count__gte=settings.FORGE_MEMORY_ROLL_THRESHOLD)
        | Q(last_interaction_at__lte=idle_since)
    )
    due = _scoped(due, tenant_ids, "tenant_id").select_related("user", "tenant")
    return [
        {
            "core": core,
            "window": core.window_count,
            # Whole seconds: a timedelta printed as is showed "0:02:04.630360".
            "waiting": (
                dt.timedelta(seconds=int((now - core.last_interaction_at).total_seconds()))
                if core.last_interaction_at
                else None
            ),
        }
        for core in due.order_by("last_interaction_at", "pk")[:10]
    ]


def dashboard(
    *, tenant_ids: Sequence[int] | None, days: int, now: dt.datetime | None = None
) -> Dashboard:
    now = now or timezone.now()
    end = now.astimezone(dt.UTC).date()
    start = end - dt.timedelta(days=days - 1)
    usage = _scoped(Usage.objects.filter(day__gte=start, day__lte=end), tenant_ids, "tenant_id")
    per_day = {
        row["day"]: row for row in usage.values("day").annotate(t=Sum("turns"), c=Sum("cost_nanos"))
    }
    series = []
    for offset in range(days):
        day = start + dt.timedelta(days=offset)
        row = per_day.get(day)
        series.append(Day(day, int(row["t"] or 0), _cost(row["c"])) if row else Day(day))
    totals = usage.aggregate(
        turns=Sum("turns"), cost=Sum("cost_nanos"), failed=Sum("failed"), aborted=Sum("aborted")
    )
    # Usage keeps a deleted user's id (no foreign key constraint): their rows are
    # grouped by id, and named from the users still there (a join dropped them).
    busiest = list(
        usage.values("user_id")
        .annotate(t=Sum("turns"), c=Sum("cost_nanos"))
        .order_by("-c", "-t")[:TOP]
    )
    names = dict(
        get_user_model()
        .objects.filter(pk__in=[row["user_id"] for row in busiest])
        .values_list("pk", "username")
    )
    top_users = [
        {
            "user": names.get(row["user_id"]) or f"user {row['user_id']}",
            "turns": row["t"],
            "cost": _cost(row["c"]),
        }
        for row in busiest
    ]
    top_agents = [
        {"agent": row["agent"] or "—", "turns": row["t"], "cost": _cost(row["c"])}
        for row in usage.values("agent")
        .annotate(t=Sum("turns"), c=Sum("cost_nanos"))
        .order_by("-c", "-t")[:TOP]
    ]
    since = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    failures = []
    replies = _replies_run_here(tenant_ids)
    for message_id, session_id, data in (
        # Aborts left out in SQL: fifty newer ones hid every failure behind them (QA).
        replies.exclude(data__error=None)
        .exclude(data__error__name="MessageAbortedError")
        .order_by("-id")
        .values_list("id", "session_id", "data")[:50]
    ):
        error = data.get("error") or {}
        # A reply without an error stores "error": null (a key that is there): never one.
        if not error or error.get("name") == "MessageAbortedError":
            continue
        if parse_time(data["created_at"]) < since:
            continue
        failures.append(
            {
                "message_id": message_id,
                "session_id": session_id,
                "at": data["created_at"],
                "name": error.get("name", ""),
                "message": str(error.get("message", ""))[:300],
            }
        )
        if len(failures) == RECENT_FAILURES:
            break
    leases = _scoped(
        SessionLease.objects.filter(expires_at__gt=now), tenant_ids, "session__tenant_id"
    )
    streaming = [
        {"session_id": lease.session_id, "owner": lease.owner, "since": lease.acquired_at}
        for lease in leases.order_by("acquired_at")[:20]
    ]
    approvals = _scoped(
        PendingApproval.objects.filter(type="tool", data__state__status="awaiting-approval"),
        tenant_ids,
        "tenant_id",
    )
    return Dashboard(
        start=start,
        end=end,
        days=series,
        turns=int(totals["turns"] or 0),
        cost=_cost(totals["cost"]),
        failed=int(totals["failed"] or 0),
        aborted=int(totals["aborted"] or 0),
        top_users=top_users,
        top_agents=top_agents,
        recent_failures=failures,
        latency=_latency(tenant_ids, since),
        streaming=streaming,
        pending_approvals=approvals.count(),
        overdue_cores=_overdue(tenant_ids, now),
    )
