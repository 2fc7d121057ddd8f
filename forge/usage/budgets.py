"""The budget check a prompt passes before anything is written.

A prompt is refused (:class:`BudgetExceeded`, 429 ``budget_exceeded``, with when the
limit resets) once the month's use has reached the tenant's limit or the user's own,
in tokens or in cost. The check reads the usage table, which is current to the last
completed reply: a reply that crosses the limit mid-turn finishes, and the next
prompt is refused. Without budgets the check is one indexed read that finds none.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from accounts.exceptions import ForgeError
from accounts.models import Tenant

from . import selectors


class BudgetExceeded(ForgeError):
    code = "budget_exceeded"
    status = 429

    def __init__(self, message: str, *, resets_at: dt.datetime) -> None:
        super().__init__(message)
        self.resets_at = resets_at

    @property
    def extra(self) -> dict[str, object]:
        return {"resets_at": self.resets_at.isoformat().replace("+00:00", "Z")}

    @property
    def retry_after(self) -> int:
        return max(1, int((self.resets_at - dt.datetime.now(dt.UTC)).total_seconds()))


def _plain(value: Any) -> str:
    """A cost as people write it: ``0.0000001``, ``12.5``, ``3`` (a Decimal's ``str`` was
    ``1E-7``, and four places made a used-up budget of 1E-7 read ``0.0000 used``)."""
    text = format(Decimal(str(value)).normalize(), "f")
    return text


def check_budget(*, tenant: Tenant, user_id: int, now: dt.datetime | None = None) -> None:
    """Raise :class:`BudgetExceeded` when a budget of ``tenant`` or of ``user_id`` in it is
    used up this month; return otherwise."""
    budgets = selectors.budgets_for(tenant=tenant, user_id=user_id)
    if not budgets:
        return
    now = now or dt.datetime.now(dt.UTC)
    start = selectors.month_start(now)
    resets_at = dt.datetime.combine(selectors.next_month(start), dt.time(), tzinfo=dt.UTC)
    for budget in sorted(budgets, key=lambda b: b.user_id is not None):
        whose = "the tenant's" if budget.user_id is None else "your"
        tokens, cost = selectors.month_use(tenant=tenant, user_id=budget.user_id, now=now)
        if budget.monthly_tokens is not None and tokens >= budget.monthly_tokens:
            raise BudgetExceeded(
                f"{whose} monthly budget of {budget.monthly_tokens} tokens is used up "
                f"({tokens} used); it resets at {resets_at:%Y-%m-%d %H:%M} UTC",
                resets_at=resets_at,
            )
        if budget.monthly_cost is not None and cost >= budget.monthly_cost:
            raise BudgetExceeded(
                f"{whose} monthly budget of {_plain(budget.monthly_cost)} in cost is used up "
                f"({_plain(cost)} used); it resets at {resets_at:%Y-%m-%d %H:%M} UTC",
                resets_at=resets_at,
            )
