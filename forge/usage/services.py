"""The writes of usage and budgets. Keyword-only, atomic.

:func:`record_reply` runs inside the transaction that completes a reply (the runtime's,
recovery's), so the table never disagrees with the log: both commit or neither. An
import, or a fork, counts nothing: what a log copied here ran elsewhere
(``Session.copied_through``, ``forge.usage.fold``). It is one ``INSERT … ON CONFLICT
DO UPDATE`` (SQLite and PostgreSQL alike), adding to the row of the reply's (tenant,
user, agent, model, day).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction

from accounts.models import Tenant, User
from forge.models import (
    NANOS,
    Budget,
    RetiredUsage,
    SessionLease,
    SideUsage,
    Usage,
    UsageCounts,
)
from sessions.models import Part, Session, SessionEvent

from .fold import TOKEN_FIELDS, Key, Totals, fold_log, key_of, reply_totals, summary_totals

_COLUMNS = (
    "turns",
    "steps",
    *(f"{name}_tokens" for name in TOKEN_FIELDS),
    "cost_nanos",
    "failed",
    "aborted",
    "tool_calls",
)


class InvalidBudget(ValueError):
    """A budget that is negative, not a number, or limits nothing."""


def nanos(cost: Decimal) -> int:
    return int((cost * NANOS).to_integral_value())


def _values(totals: Totals) -> list[int]:
    return [
        totals.turns,
        totals.steps,
        *(totals.tokens[name] for name in TOKEN_FIELDS),
        nanos(totals.cost),
        totals.failed,
        totals.aborted,
        totals.tool_calls,
    ]


# The first key of the advisory lock on a tenant's usage rows (PostgreSQL): every write
# that adds to them holds it shared, :func:`rebuild_usage` alone (exclusive).
ADVISORY_CLASS = 0x555347  # "USG"


def _upsert(
    tenant_id: int, rows: Iterable[tuple[Key, Totals]], *, model: type[UsageCounts] = Usage
) -> None:
    """Add ``rows`` to the tenant's rows of ``model`` (a row a key has not yet is made).

    On PostgreSQL the statement first takes the tenant's usage lock, shared, until the
    transaction ends: a write waits while :func:`rebuild_usage` rebuilds the tenant,
    and the rebuild waits for the writes under way. So the rebuild's fold reads every
    reply exactly when its count is in the table, never once from the log and again
    from a row (a reply completing during a rebuild, under a key that had no row yet,
    was counted twice). SQLite has one writer: nothing to take."""
    table = model._meta.db_table
    columns = ", ".join(_COLUMNS)
    marks = ", ".join(["%s"] * (5 + len(_COLUMNS)))
    adds = ", ".join(f"{c} = {table}.{c} + excluded.{c}" for c in _COLUMNS)
    postgres = connection.vendor == "postgresql"
    values = (
        f"SELECT {marks} FROM (SELECT pg_advisory_xact_lock_shared(%s, %s)) AS held"
        if postgres
        else f"VALUES ({marks})"
    )
    statement = (
        f"INSERT INTO {table} (tenant_id, user_id, agent, model, day, {columns}) {values} "
        f"ON CONFLICT (tenant_id, user_id, agent, model, day) DO UPDATE SET {adds}"
    )
    lock = [ADVISORY_CLASS, tenant_id] if postgres else []
    params: list[list[Any]] = [
        [tenant_id, key.user_id, key.agent, key.model, key.day, *_values(totals), *lock]
        for key, totals in rows
    ]
    if params:
        with connection.cursor() as cursor:
            cursor.executemany(statement, params)


def record_reply(
    *,
    session: Session,
    info: Mapping[str, Any],
    parts: Iterable[Mapping[str, Any]] | None = None,
) -> Totals | None:
    """Count the reply ``info``, which the write just logged completes (it was open:
    the caller knows, :func:`forge.usage.fold.completes` is the rule); what it added
    (None: no user is known for it, and it counted nowhere).

    ``parts``: the reply's parts as logged (read from the projection when not given).
    In a session whose log was copied here (``session.copied_through``: an import, a
    fork), they are read from the projection in any case, those logged after the copy
    only: the copy's parts ran elsewhere and bill nothing (``forge.usage.fold``), so
    this count is the one ``rebuild_usage`` folds from the log.
    Call it inside the transaction that logged ``info``."""
    if parts is None or session.copied_through:
        rows = Part.objects.filter(
            tenant_id=session.tenant_id, message_id=info["id"], type__in=("step-finish", "tool")
        )
        if session.copied_through:
            rows = rows.filter(seq__gt=session.copied_through)
        parts = rows.values_list("data", flat=True)
    key = key_of(info, owner_id=session.user_id)
    if key is None:
        return None
    totals = reply_totals(info, parts)
    _upsert(session.tenant_id, [(key, totals)])
    return totals


def record_summary(*, session: Session, info: Mapping[str, Any]) -> Totals | None:
    """Count the compaction summary ``info``, which the write just logged completes
    (:func:`forge.usage.fold.completes_summary`): its tokens and cost, no turn. Call it
    inside the transaction that logged ``info``."""
    key = key_of(info, owner_id=session.user_id)
    if key is None:
        return None
    totals = summary_totals(info)
    _upsert(session.tenant_id, [(key, totals)])
    return totals


@transaction.atomic
def record_side_call(
    *,
    tenant_id: int,
    user_id: int,
    agent: str,
    model: str,
    tokens: Mapping[str, int],
    cost: Decimal | float,
    day: dt.date | None = None,
) -> Totals:
    """Count a model call that no session log records (a session's title by the small
    model): its tokens and cost, no turn, in :class:`Usage` and in
    :class:`~forge.models.SideUsage` (which :func:`rebuild_usage` adds back), together.
    ``model`` is ``provider/model``; ``day`` the UTC day (today)."""
    totals = Totals()
    for name in TOKEN_FIELDS:
        totals.tokens[name] += max(0, int(tokens.get(name, 0)))
    totals.cost = max(Decimal(0), Decimal(str(cost)))
    day = day or dt.datetime.now(dt.UTC).date()
    key = Key(user_id=user_id, agent=agent, model=model, day=day)
    _upsert(tenant_id, [(key, totals)])
    _upsert(tenant_id, [(key, totals)], model=SideUsage)
    return totals


def _fold_session(
    tenant_id: int, session_id: str, owner_id: int | None, copied_through: int | None
) -> list[Any]:
    events = (
        SessionEvent.objects.filter(tenant_id=tenant_id, session_id=session_id)
        .filter(type__in=_FOLDED)
        .order_by("seq")
        .values("seq", "type", "data")
    )
    return fold_log(
        events.iterator(chunk_size=2000), owner_id=owner_id, copied_through=copied_through
    )


def retire_log(*, session: Session) -> int:
    """Keep what the log of ``session``, about to be deleted, counted (its fold) in
    :class:`~forge.models.RetiredUsage`; the replies. Call it inside the deleting
    transaction, before the log goes. The usage table itself is not touched."""
    found = _fold_session(session.tenant_id, session.pk, session.user_id, session.copied_through)
    _upsert(session.tenant_id, found, model=RetiredUsage)
    return sum(totals.turns for _, totals in found)


def on_session_deleting(sender: Any, session: Session, **kwargs: Any) -> None:
    """``sessions.signals.session_deleting``: keep the deleted log's usage."""
    retire_log(session=session)


def hold(*, tenant: Tenant, session_id: str, user_id: int, tokens: int, cost_nanos: int) -> None:
    """Write what the turn running in session ``session_id`` holds against budgets on its
    lease (``forge.usage.budgets.reserve``, in the prompt's transaction): it is freed with
    the lease."""
    table = SessionLease._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET reserved_by = %s, reserved_tokens = %s, "
            "reserved_cost_nanos = %s WHERE session_id = %s AND tenant_id = %s",
            [user_id, tokens, cost_nanos, session_id, tenant.pk],
        )


def _row_totals(row: UsageCounts) -> tuple[Key, Totals]:
    totals = Totals(
        turns=row.turns,
        steps=row.steps,
        tokens={name: getattr(row, f"{name}_tokens") for name in TOKEN_FIELDS},
        cost=Decimal(row.cost_nanos) / NANOS,
        failed=row.failed,
        aborted=row.aborted,
        tool_calls=row.tool_calls,
    )
    return Key(user_id=row.user_id, agent=row.agent, model=row.model, day=row.day), totals


def rebuild_usage(*, since: dt.date | None = None, tenant: Tenant | None = None) -> int:
    """Recompute the usage table from the logs (all tenants, or ``tenant``): the rows of
    the days from ``since`` on (all days without it) are replaced by the fold of every
    session's log plus what deleted logs had counted (:class:`RetiredUsage`) and the
    calls no log records (:class:`SideUsage`). Returns
    the replies counted. One transaction per tenant, holding its usage lock (PostgreSQL,
    see :func:`_upsert`): replies that complete meanwhile wait to add their count until
    the tenant is rebuilt."""
    tenants = [tenant] if tenant is not None else list(Tenant.objects.order_by("pk"))
    counted = 0
    for one in tenants:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ADVISORY_CLASS, one.pk])
            rows = Usage.objects.filter(tenant=one)
            if since is not None:
                rows = rows.filter(day__gte=since)
            rows.delete()
            merged: dict[Key, Totals] = {}
            sessions = Session.objects.filter(tenant=one).values_list(
                "pk", "user_id", "copied_through"
            )
            for session_id, owner_id, copied in sessions.iterator(chunk_size=500):
                for key, totals in _fold_session(one.pk, session_id, owner_id, copied):
                    if since is not None and key.day < since:
                        continue
                    # In nanos reply by reply, as recording adds each (a key's sum
                    # rounded once differed: 37.5 + 37.5 nanos were 76 live, 75 here).
                    totals.cost = Decimal(nanos(totals.cost)) / NANOS
                    merged.setdefault(key, Totals()).add(totals)
                    counted += totals.turns
            for kept in (RetiredUsage, SideUsage):  # what no remaining log holds
                apart = kept.objects.filter(tenant=one)
                if since is not None:
                    apart = apart.filter(day__gte=since)
                for row in apart.iterator(chunk_size=2000):
                    key, totals = _row_totals(row)
                    merged.setdefault(key, Totals()).add(totals)
                    counted += totals.turns
            _upsert(one.pk, merged.items())
    return counted


_FOLDED = ("message.updated", "message.removed", "part.updated", "part.removed")


_COST_PLACES = 10  # Budget.monthly_cost's decimal places
_COST_DIGITS = 15  # what a float (SQLite's storage of a decimal) gives back exactly
_MAX_LIMIT = Decimal(10**14)  # what Budget.monthly_cost's 24 digits, 10 of them decimals, hold


def clean_limit(value: Any, *, name: str, integer: bool) -> Any:
    """A budget's limit as stored, or ``InvalidBudget`` (``set_budget`` and the admin's
    form check the same: the form took 9e18 tokens, which the command refused)."""
    if value is None:
        return None
    # Decimal also reads "1_000" and other scripts' digits (U+FF15, U+0663): a limit is written
    # in ASCII digits, as the API's numbers are (QA).
    if isinstance(value, str) and (not value.isascii() or "_" in value):
        raise InvalidBudget(f"{name}: expected a number, got {value!r}")
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        raise InvalidBudget(f"{name}: expected a number, got {value!r}") from None
    if not number.is_finite():
        raise InvalidBudget(f"{name}: expected a finite number, got {value!r}")
    if number < 0:
        raise InvalidBudget(f"{name}: must not be negative, got {value}")
    if number >= _MAX_LIMIT:
        raise InvalidBudget(f"{name}: must be under {_MAX_LIMIT:.0e}, got {value}")
    if integer:
        if number != number.to_integral_value():
            raise InvalidBudget(f"{name}: expected a whole number of tokens, got {value}")
        return int(number)
    if number and number.as_tuple().exponent < -_COST_PLACES:  # type: ignore[operator]
        # The column keeps 10 places: 1E-11 was stored as 0, a limit that refused everything.
        raise InvalidBudget(
            f"{name}: at most {_COST_PLACES} decimal places, got {value} (0 removes the limit)"
        )
    if number and len(number.normalize().as_tuple().digits) > _COST_DIGITS:
        # SQLite keeps a decimal as a float: 1234567.0123456789 was stored as
        # 1234567.01234568 (the command said the first), and 24 digits as 1E+14, which no
        # read of the row could take back (QA).
        raise InvalidBudget(f"{name}: at most {_COST_DIGITS} significant digits, got {value}")
    return number


KEEP: Any = object()  # set_budget: leave this limit as it is


@transaction.atomic
def set_budget(
    *,
    tenant: Tenant,
    user: User | None = None,
    monthly_tokens: Any = KEEP,
    monthly_cost: Any = KEEP,
) -> Budget | None:
    """Set the monthly limits of ``tenant`` (or of ``user`` in it); a limit not given
    (``KEEP``) stays as it is. A limit of 0 or None is no limit; with neither left, the
    budget is removed (None is returned). Raises :class:`InvalidBudget` for a negative
    or non-numeric limit, before changing anything.

    Two first budgets of one tenant or user set at once (two operators, two commands)
    both found no row: the second insert broke the unique constraint, a traceback from
    the command and a 500 in the admin. It is set again, over the row the other made."""
    try:
        with transaction.atomic():
            return _set_budget(tenant, user, monthly_tokens, monthly_cost)
    except IntegrityError:
        return _set_budget(tenant, user, monthly_tokens, monthly_cost)


def _locked_budget(tenant: Tenant, user: User | None) -> Budget | None:
    return Budget.objects.select_for_update().filter(tenant=tenant, user=user).first()


def _set_budget(
    tenant: Tenant, user: User | None, monthly_tokens: Any, monthly_cost: Any
) -> Budget | None:
    budget = _locked_budget(tenant, user)
    tokens = (
        (budget.monthly_tokens if budget else None)
        if monthly_tokens is KEEP
        else clean_limit(monthly_tokens, name="monthly tokens", integer=True) or None
    )
    cost = (
        (budget.monthly_cost if budget else None)
        if monthly_cost is KEEP
        else clean_limit(monthly_cost, name="monthly cost", integer=False) or None
    )
    if tokens is None and cost is None:
        if budget is not None:
            budget.delete()
        return None
    if budget is None:
        budget = Budget(tenant=tenant, user=user)
    budget.monthly_tokens, budget.monthly_cost = tokens, cost
    budget.save()
    return budget
