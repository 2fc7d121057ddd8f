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
from forge.models import NANOS, Budget, Usage

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
    """Tokens (input + output + reasoning) and cost used in ``now``'s UTC calendar month,
    by the tenant (``user_id`` None) or by that user in it."""
    start = month_start(now)
    end = next_month(start) - dt.timedelta(days=1)
    rows = _rows(tenant, user_id=user_id, start=start, end=end)
    totals = rows.aggregate(
        tokens=Sum(F("input_tokens") + F("output_tokens") + F("reasoning_tokens")),
        cost=Sum("cost_nanos"),
    )
    return int(totals["tokens"] or 0), Decimal(totals["cost"] or 0) / NANOS


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
