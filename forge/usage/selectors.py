"""The reads of usage: the usage API's report and a calendar month's use. Every read
takes the tenant."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import F, QuerySet, Sum

from accounts.models import Tenant
from forge.models import NANOS, Budget, SessionLease, Usage

GROUPS = ("user", "agent", "model", "day")
_COUNTS = (
    "turns",
    "steps",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_nanos",
    "failed",
    "aborted",
    "tool_calls",
)


def _rows(tenant: Tenant, *, user_id: int | None, start: dt.date, end: dt.date) -> QuerySet[Usage]:
    rows = Usage.objects.filter(tenant=tenant, day__gte=start, day__lte=end)
    return rows if user_id is None else rows.filter(user_id=user_id)


def report(
    *, tenant: Tenant, user_id: int | None, start: dt.date, end: dt.date, group_by: str
) -> list[dict[str, Any]]:
    """Usage from ``start`` to ``end`` (UTC days, both included), one row per value of
    ``group_by`` (``user``, ``agent``, ``model`` or ``day``), largest cost first (``day``:
    oldest first); ``user_id``: that user's use only."""
    if group_by not in GROUPS:
        raise ValueError(f"group_by: one of {', '.join(GROUPS)}")
    field = "user_id" if group_by == "user" else group_by
    rows = (
        _rows(tenant, user_id=user_id, start=start, end=end)
        .values(field)
        .annotate(**{f"sum_{name}": Sum(name) for name in _COUNTS})
    )
    ordering = [field] if group_by == "day" else ["-sum_cost_nanos", field]
    found = []
    for row in rows.order_by(*ordering):
        item: dict[str, Any] = {group_by: row[field]}
        if group_by == "day":
            item["day"] = row[field].isoformat()
        for name in _COUNTS:
            if name != "cost_nanos":
                item[name] = row[f"sum_{name}"] or 0
        item["cost"] = float(Decimal(row["sum_cost_nanos"] or 0) / NANOS)
        found.append(item)
    return found


def month_start(now: dt.datetime) -> dt.date:
    return now.astimezone(dt.UTC).date().replace(day=1)


def next_month(start: dt.date) -> dt.date:
    return (start.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def month_use(*, tenant: Tenant, user_id: int | None, now: dt.datetime) -> tuple[int, Decimal]:
    """Tokens (input + output: output holds the reasoning tokens, as every provider reports
    them) and cost used in ``now``'s UTC calendar month,
    by the tenant (``user_id`` None) or by that user in it."""
    use = month_totals(tenant=tenant, user_id=user_id, now=now)
    return use.tokens, use.cost


@dataclass(frozen=True)
class MonthUse:
    tokens: int  # input + output (reasoning is part of output)
    cost: Decimal
    turns: int  # replies completed
    ended_normally: int  # of them, neither failed nor aborted


def month_totals(*, tenant: Tenant, user_id: int | None, now: dt.datetime) -> MonthUse:
    """:func:`month_use` with the number of replies it counts."""
    start = month_start(now)
    end = next_month(start) - dt.timedelta(days=1)
    rows = _rows(tenant, user_id=user_id, start=start, end=end)
    totals = rows.aggregate(
        tokens=Sum(F("input_tokens") + F("output_tokens")),
        cost=Sum("cost_nanos"),
        turns=Sum("turns"),
        failed=Sum("failed"),
        aborted=Sum("aborted"),
    )
    turns = int(totals["turns"] or 0)
    return MonthUse(
        tokens=int(totals["tokens"] or 0),
        cost=Decimal(totals["cost"] or 0) / NANOS,
        turns=turns,
        ended_normally=turns - int(totals["failed"] or 0) - int(totals["aborted"] or 0),
    )


@dataclass(frozen=True)
class Held:
    """What replies still running hold against a budget (their leases' reservations)."""

    tokens: int
    cost: Decimal
    replies: int


def held_by_running(*, tenant: Tenant, user_id: int | None, now: dt.datetime, besides: str) -> Held:
    """The reservations of the live leases of ``tenant`` (of ``user_id``'s turns in it when
    given), but the lease of session ``besides`` (the caller's own)."""
    table = SessionLease._meta.db_table
    where = "tenant_id = %s AND expires_at > %s AND session_id <> %s AND reserved_by IS NOT NULL"
    params: list[Any] = [tenant.pk, connection.ops.adapt_datetimefield_value(now), besides]
    if user_id is not None:
        where, params = where + " AND reserved_by = %s", [*params, user_id]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(reserved_tokens), 0), coalesce(sum(reserved_cost_nanos), 0), "
            f"count(*) FROM {table} WHERE {where}",
            params,
        )
        tokens, cost_nanos, replies = cursor.fetchone()
    return Held(tokens=int(tokens), cost=Decimal(int(cost_nanos)) / NANOS, replies=int(replies))


@dataclass(frozen=True)
class Limit:
    user_id: int | None  # None: the tenant's
    monthly_tokens: int | None
    monthly_cost: Decimal | None


def budgets_for(*, tenant: Tenant, user_id: int) -> list[Limit]:
    """The budgets a prompt of ``user_id`` in ``tenant`` must be within: the tenant's and
    the user's own, when set. One plain statement: it runs before every prompt."""
    table = Budget._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT user_id, monthly_tokens, monthly_cost FROM {table} "
            "WHERE tenant_id = %s AND (user_id IS NULL OR user_id = %s)",
            [tenant.pk, user_id],
        )
        rows = cursor.fetchall()
    return [
        Limit(
            user_id=row[0],
            monthly_tokens=row[1],
            monthly_cost=None if row[2] is None else Decimal(str(row[2])),
        )
        for row in rows
    ]
