"""The budget check a prompt passes before anything is written, and what a running
turn holds against budgets.

A prompt is refused (:class:`BudgetExceeded`, 429 ``budget_exceeded``, with when the
limit resets) once the month's use has reached the tenant's limit or the user's own,
in tokens or in cost. The use is the usage table's, current to the last completed
reply, **plus what the replies still running hold**: each turn that a budget applies
to reserves, on its session's lease, an estimate of what it will use (:func:`reserve`:
the average reply of its speaker's month, else of the tenant's, else
``FORGE_BUDGET_RESERVE_TOKENS`` priced as input). The reservation goes with the lease
when the turn ends (its usage is then in the table) or when its process dies (the
lease expires). So prompts sent at once in many sessions no longer all pass a check
that only counts finished replies: the reservations and the check of each prompt are
serialized per tenant (an advisory lock in the prompt's transaction on PostgreSQL,
SQLite's one writer), and the month can end past its limit by about one reply, not by
as many as were sent together. A refusal because of running replies says so, and
its ``Retry-After`` is short: they finish soon.

A reply that crosses the limit mid-turn finishes; the next prompt is refused. Without
budgets the check is one indexed read that finds none, and nothing is reserved.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection

from accounts.exceptions import ForgeError
from accounts.models import Tenant
from accounts.times import format_time
from forge.models import NANOS, Agent

from . import selectors, services

# The first key of the advisory lock that serializes a tenant's budget reservations.
ADVISORY_CLASS = 0x424447  # "BDG"


class BudgetExceeded(ForgeError):
    code = "budget_exceeded"
    status = 429

    def __init__(
        self, message: str, *, resets_at: dt.datetime, running: int = 0, retry_in: int = 0
    ) -> None:
        super().__init__(message)
        self.resets_at = resets_at
        self.running = running  # replies still running that hold the rest of the budget
        self.retry_in = retry_in  # seconds, when those replies free it (0: at the reset)

    @property
    def extra(self) -> dict[str, object]:
        # A wire time as every other (CONTRACT §2: milliseconds); it lacked them (QA).
        extra: dict[str, object] = {"resets_at": format_time(self.resets_at)}
        if self.running:
            extra["running"] = self.running
        return extra

    @property
    def retry_after(self) -> int:
        if self.retry_in:
            return self.retry_in
        return max(1, int((self.resets_at - dt.datetime.now(dt.UTC)).total_seconds()))


def plain(value: Any) -> str:
    """A cost as people write it: ``0.0000001``, ``12.5``, ``3`` (a Decimal's ``str`` was
    ``1E-7``, and four places made a used-up budget of 1E-7 read ``0.0000 used``)."""
    text = format(Decimal(str(value)).normalize(), "f")
    return text


def unpriced_models() -> list[str]:
    """The models this server calls (``FORGE_MODEL``, ``FORGE_SMALL_MODEL``, the agents'
    own) that ``FORGE_MODEL_PRICES`` gives no price: their calls cost 0, so a limit in
    cost never counts them (``set_budget`` and the admin say so when one is set)."""
    models = {settings.FORGE_MODEL, settings.FORGE_SMALL_MODEL}
    models |= set(Agent.objects.exclude(model="").values_list("model", flat=True))
    prices = settings.FORGE_MODEL_PRICES
    return sorted(m for m in models if m and not any((prices.get(m) or {}).values()))


def unpriced_warning() -> str | None:
    """What an operator who sets a cost limit should know, when some model is unpriced."""
    unpriced = unpriced_models()
    if not unpriced:
        return None
    return (
        f"FORGE_MODEL_PRICES has no price for {', '.join(unpriced)}: their calls cost 0, "
        "and a limit in cost does not count them"
    )


def _resets_at(now: dt.datetime) -> dt.datetime:
    start = selectors.month_start(now)
    return dt.datetime.combine(selectors.next_month(start), dt.time(), tzinfo=dt.UTC)


def _refuse_when_used_up(
    budget: selectors.Limit,
    use: selectors.MonthUse,
    held: selectors.Held,
    *,
    resets_at: dt.datetime,
) -> None:
    whose = "the tenant's" if budget.user_id is None else "your"
    when = f"it resets at {resets_at:%Y-%m-%d %H:%M} UTC"
    running = held.replies
    retry_in = max(1, int(settings.FORGE_LEASE_SECONDS)) if running else 0
    if budget.monthly_tokens is not None and use.tokens + held.tokens >= budget.monthly_tokens:
        if use.tokens >= budget.monthly_tokens:
            detail = f"is used up ({use.tokens} used); {when}"
        else:
            detail = (
                f"is held by replies still running ({use.tokens} used, {held.tokens} "
                f"reserved by {running} running); try again when they finish"
            )
        raise BudgetExceeded(
            f"{whose} monthly budget of {budget.monthly_tokens} tokens {detail}",
            resets_at=resets_at,
            running=running if use.tokens < budget.monthly_tokens else 0,
            retry_in=retry_in if use.tokens < budget.monthly_tokens else 0,
        )
    if budget.monthly_cost is not None and use.cost + held.cost >= budget.monthly_cost:
        if use.cost >= budget.monthly_cost:
            detail = f"is used up ({plain(use.cost)} used); {when}"
        else:
            detail = (
                f"is held by replies still running ({plain(use.cost)} used, "
                f"{plain(held.cost)} reserved by {running} running); try again when they "
                "finish"
            )
        raise BudgetExceeded(
            f"{whose} monthly budget of {plain(budget.monthly_cost)} in cost {detail}",
            resets_at=resets_at,
            running=running if use.cost < budget.monthly_cost else 0,
            retry_in=retry_in if use.cost < budget.monthly_cost else 0,
        )


NOTHING_HELD = selectors.Held(tokens=0, cost=Decimal(0), replies=0)


def check_budget(
    *, tenant: Tenant, user_id: int, now: dt.datetime | None = None
) -> list[selectors.Limit]:
    """Raise :class:`BudgetExceeded` when a budget of ``tenant`` or of ``user_id`` in it is
    used up this month by finished replies; else return the budgets that apply (none: no
    budget, nothing to reserve). The early check, before a prompt stores anything;
    :func:`reserve` counts the running replies too, in the prompt's transaction."""
    budgets = selectors.budgets_for(tenant=tenant, user_id=user_id)
    if not budgets:
        return budgets
    now = now or dt.datetime.now(dt.UTC)
    for budget in sorted(budgets, key=lambda b: b.user_id is not None):
        use = selectors.month_totals(tenant=tenant, user_id=budget.user_id, now=now)
        _refuse_when_used_up(budget, use, NOTHING_HELD, resets_at=_resets_at(now))
    return budgets


def _estimate(uses: Sequence[selectors.MonthUse], model: str) -> tuple[int, Decimal]:
    """What one reply will use: the average reply of the first of ``uses`` that has one
    that ended normally, else ``FORGE_BUDGET_RESERVE_TOKENS`` at ``model``'s input price.
    The average is over the replies that ended normally (an aborted reply that used
    nothing would lower it), of all the month's tokens: it errs high."""
    for use in uses:
        if use.ended_normally > 0:
            count = use.ended_normally
            return max(1, use.tokens // count), use.cost / count
    tokens = int(settings.FORGE_BUDGET_RESERVE_TOKENS)
    table = settings.FORGE_MODEL_PRICES.get(model, {})
    per_million = Decimal(str(table.get("input", 0)))
    return tokens, per_million * tokens / 1_000_000


def reserve(
    *,
    tenant: Tenant,
    user_id: int,
    session_id: str,
    budgets: Sequence[selectors.Limit],
    model: str,
    now: dt.datetime | None = None,
) -> None:
    """Refuse the turn (:class:`BudgetExceeded`) when finished replies and the replies still
    running have used up one of ``budgets``; else hold this turn's estimate on its lease.

    In the prompt's transaction, after the turn took session ``session_id``'s lease (a
    refusal rolls the lease back with the prompt). Per tenant, one reservation at a
    time: PostgreSQL takes a transaction-scoped advisory lock on the tenant first, and
    SQLite's ``BEGIN IMMEDIATE`` transaction is the lock. Nothing to do without budgets.
    """
    if not budgets:
        return
    now = now or dt.datetime.now(dt.UTC)
    resets_at = _resets_at(now)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ADVISORY_CLASS, tenant.pk])
    uses: dict[int | None, selectors.MonthUse] = {}
    for budget in sorted(budgets, key=lambda b: b.user_id is not None):
        use = uses[budget.user_id] = selectors.month_totals(
            tenant=tenant, user_id=budget.user_id, now=now
        )
        held = selectors.held_by_running(
            tenant=tenant, user_id=budget.user_id, now=now, besides=session_id
        )
        _refuse_when_used_up(budget, use, held, resets_at=resets_at)
    if user_id not in uses:
        uses[user_id] = selectors.month_totals(tenant=tenant, user_id=user_id, now=now)
    if None not in uses and not uses[user_id].ended_normally:
        # A user budget alone, and the speaker has no reply this month: the tenant's
        # average, as documented (it was never read then: the 1,000-token fallback).
        uses[None] = selectors.month_totals(tenant=tenant, user_id=None, now=now)
    tokens, cost = _estimate([uses[user_id], *([uses[None]] if None in uses else [])], model)
    services.hold(
        tenant=tenant,
        session_id=session_id,
        user_id=user_id,
        tokens=tokens,
        cost_nanos=int(cost * NANOS),
    )
