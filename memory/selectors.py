"""All reads of the memory store. Every selector takes the tenant.

An object of another tenant is indistinguishable from a missing one: both
raise ``NotFound`` (or give an empty result, for searches and lists).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL

from accounts.models import Tenant

from . import search
from .exceptions import InvalidQuery, NotFound
from .ids import is_valid_id
from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .wire import (
    HISTORY_HEAD_OLDER,
    core_wire,
    history_block_wire,
    history_digest_line,
    history_line,
    hit_wire,
    indexed_message_wire,
    unit_wire,
    window_message_wire,
)

HISTORY_SLICES = 8
HISTORY_CHARS = 4000
SEARCH_LIMIT = 10


# --- cores ----------------------------------------------------------------------------


def get_core(*, tenant: Tenant, core_id: str, user: AbstractBaseUser | None = None) -> MemoryCore:
    """The tenant's core ``core_id`` (only when it is ``user``'s, when given)."""
    if not is_valid_id(core_id):
        raise NotFound(f"no memory core {core_id!r}")
    cores = MemoryCore.objects.select_related("user").filter(tenant=tenant)
    if user is not None:
        cores = cores.filter(user_id=user.pk)
    try:
        return cores.get(pk=core_id)
    except MemoryCore.DoesNotExist:
        raise NotFound(f"no memory core {core_id!r}") from None


def find_core(*, tenant: Tenant, user: AbstractBaseUser, agent: str) -> MemoryCore | None:
    """The core of (tenant, user, agent), if one was started."""
    return (
        MemoryCore.objects.select_related("user")
        .filter(tenant=tenant, user_id=user.pk, agent=agent)
        .first()
    )


def list_cores(
    *, tenant: Tenant, user: AbstractBaseUser | None = None, agent: str | None = None
) -> QuerySet[MemoryCore]:
    """The tenant's cores, most recently active first."""
    cores = MemoryCore.objects.select_related("user").filter(tenant=tenant)
    if user is not None:
        cores = cores.filter(user_id=user.pk)
    if agent is not None:
        cores = cores.filter(agent=agent)
    return cores.order_by("-last_interaction_at", "-id")


def unit_ids(*, tenant: Tenant, core: MemoryCore) -> list[str]:
    """The core's units, oldest first."""
    return list(
        MemoryUnit.objects.filter(tenant=tenant, core=core)
        .order_by("id")
        .values_list("id", flat=True)
    )


def core_data(
    *, tenant: Tenant, core_id: str, user: AbstractBaseUser | None = None
) -> dict[str, Any]:
    """The core's wire shape (``user``: only when it is theirs)."""
    core = get_core(tenant=tenant, core_id=core_id, user=user)
    return core_wire(core, unit_ids(tenant=tenant, core=core))


def cores_data(*, tenant: Tenant, cores: Sequence[MemoryCore]) -> list[dict[str, Any]]:
    """The wire shapes of ``cores`` (a page of ``list_cores``), in their order, with every
    core's unit ids read in one query. A core of another tenant lists no units."""
    units: dict[str, list[str]] = {core.pk: [] for core in cores}
    rows = (
        MemoryUnit.objects.filter(tenant=tenant, core_id__in=list(units))
        .order_by("id")
        .values_list("core_id", "id")
    )
    for core_id, unit_id in rows:
        units[core_id].append(unit_id)
    return [core_wire(core, units[core.pk]) for core in cores]


def dialogue_window(*, tenant: Tenant, core: MemoryCore) -> list[dict[str, Any]]:
    """The messages in the core's dialogue window, oldest first, ``{role, text, at, seq}``."""
    rows = DialogueMessage.objects.filter(tenant=tenant, core=core).order_by("seq")
    return [window_message_wire(row) for row in rows]


# --- units and slices -------------------------------------------------------------------


def get_unit(*, tenant: Tenant, unit_id: str, user: AbstractBaseUser | None = None) -> MemoryUnit:
    """The tenant's unit ``unit_id`` (only when its core is ``user``'s, when given)."""
    if not is_valid_id(unit_id):
        raise NotFound(f"no memory unit {unit_id!r}")
    units = MemoryUnit.objects.select_related("core").filter(tenant=tenant)
    if user is not None:
        units = units.filter(core__user_id=user.pk)
    try:
        return units.get(pk=unit_id)
    except MemoryUnit.DoesNotExist:
        raise NotFound(f"no memory unit {unit_id!r}") from None


def unit_slices(*, tenant: Tenant, unit: MemoryUnit) -> list[MemorySlice]:
    """The unit's slices, by creation time."""
    return list(MemorySlice.objects.filter(tenant=tenant, unit=unit).order_by("created_at", "id"))


def _check_range(start: Any, end: Any) -> None:
    for name, value in (("start", start), ("end", end)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise InvalidQuery(f"{name} must be a non-negative integer")


def unit_messages(
    *, tenant: Tenant, unit_id: str, start: int = 0, end: int | None = None
) -> list[dict[str, Any]]:
    """Messages ``[start, end)`` of the unit, ``{role, text, at, index}`` each."""
    _check_range(start, end)
    unit = get_unit(tenant=tenant, unit_id=unit_id)
    return _messages(tenant, unit, start, end)


def unit_message_rows(
    *, tenant: Tenant, unit: MemoryUnit, start: int = 0, end: int | None = None
) -> list[MemoryMessage]:
    """The rows of messages ``[start, end)`` of ``unit`` (got from ``get_unit``), by index."""
    _check_range(start, end)
    rows = MemoryMessage.objects.filter(tenant=tenant, unit=unit, index__gte=start)
    if end is not None:
        rows = rows.filter(index__lt=end)
    return list(rows.order_by("index"))


def _messages(
    tenant: Tenant, unit: MemoryUnit, start: int, end: int | None
) -> list[dict[str, Any]]:
    rows = unit_message_rows(tenant=tenant, unit=unit, start=start, end=end)
    return [indexed_message_wire(row) for row in rows]


def unit_data(*, tenant: Tenant, unit_id: str) -> dict[str, Any]:
    """The unit's wire shape, with all its messages and slices."""
    unit = get_unit(tenant=tenant, unit_id=unit_id)
    messages = MemoryMessage.objects.filter(tenant=tenant, unit=unit).order_by("index")
    return unit_wire(
        unit, messages.iterator(chunk_size=2000), unit_slices(tenant=tenant, unit=unit)
    )


def get_slice(*, tenant: Tenant, slice_id: str) -> MemorySlice:
    if not is_valid_id(slice_id):
        raise NotFound(f"no memory slice {slice_id!r}")
    try:
        return MemorySlice.objects.select_related("unit", "unit__core").get(
            tenant=tenant, pk=slice_id
        )
    except MemorySlice.DoesNotExist:
        raise NotFound(f"no memory slice {slice_id!r}") from None


def slice_messages(*, tenant: Tenant, slice_id: str) -> list[dict[str, Any]]:
    """The raw messages the slice summarizes (its unit's ``[start_index, end_index)``)."""
    item = get_slice(tenant=tenant, slice_id=slice_id)
    return _messages(tenant, item.unit, item.start_index, item.end_index)


# --- the dialog_history context block ----------------------------------------------------


def dialog_history_block(*, tenant: Tenant, core: MemoryCore) -> dict[str, Any] | None:
    """The ``dialog_history`` context block of the core, or None before its first rolling.

    ``{"kind": "dialog_history", "key": "memory", "text", "core_id", "unit_id",
    "memory_session_id", "slice_ids", "digest_at", "updated_at"}``: the core's history
    digest (the older slices condensed, ``memory.digest``; ``digest_at`` is the newest
    condensed slice's time, None without one) and then the summaries of its most recent
    slices that are not condensed, oldest first, within ``FORGE_MEMORY_HISTORY_SLICES``
    slices and ``FORGE_MEMORY_HISTORY_CHARS`` characters (the digest counted);
    ``unit_id`` and ``memory_session_id`` name the most recently updated unit. A later
    block of the same kind and key replaces this one.

    The slices come from as many units as it takes, newest unit first: an idle rolling
    starts a unit, and a block of the new unit's slices alone left the model with
    nothing in place of the earlier turns it hides (``rolled_through``) once the new
    unit rolled (a chat resumed the next day lost the day before).

    Every rolling condenses what the block has no room for (``memory.digest``), so the
    slices not condensed are the newest ones: the walk stops at the first unit holding
    a condensed slice. When slices not condensed are still left out (the settings were
    lowered since, or a unit was restored), the text's first line says that older
    dialogue is not summarized here.
    """
    if core.tenant_id != tenant.pk:
        raise NotFound(f"no memory core {core.pk!r}")
    count = history_slices()
    units = MemoryUnit.objects.filter(tenant=tenant, core=core, slice_count__gt=0).order_by(
        "-updated_at", "-id"
    )
    newest_unit: MemoryUnit | None = None
    slices: list[MemorySlice] = []
    older = False  # the core holds slices, not condensed, older than those chosen
    found = units.iterator(chunk_size=4)  # most blocks need one or two
    for unit in found:
        newest_unit = newest_unit or unit
        room = count - len(slices)
        taken = list(
            MemorySlice.objects.filter(tenant=tenant, unit=unit, digested=False).order_by(
                "-created_at", "-id"
            )[: room + 1]
        )
        if len(taken) > room:
            slices += taken[:room]
            older = True
            break
        slices += taken
        if len(taken) < unit.slice_count:  # the rest is condensed, as is every older unit
            break
        if len(slices) >= count:
            following = next(found, None)
            older = following is not None and (
                MemorySlice.objects.filter(tenant=tenant, unit=following, digested=False).exists()
            )
            break
    if newest_unit is None:
        return None
    return history_block(core=core, unit=newest_unit, newest_first=slices, older=older)


def history_slices() -> int:
    """``FORGE_MEMORY_HISTORY_SLICES``: at most how many slices the block shows (>= 1)."""
    return max(int(getattr(settings, "FORGE_MEMORY_HISTORY_SLICES", HISTORY_SLICES)), 1)


def last_rolled_message(
    *, tenant: Tenant, core: MemoryCore, session_id: str, before: str | None = None
) -> str | None:
    """The ``message_id`` of the newest message of session ``session_id`` that the core
    has rolled (that one of its units holds), or None when it rolled none of it.

    With ``before``, the newest whose id is below it. Session message ids sort by
    creation, so every message of the session up to the one returned that went to
    this core's window has been rolled (the window is rolled oldest first). The
    runtime logs it in the ``dialog_history`` block as ``rolled_through``: the model
    sees the block in place of those turns. One backward walk of the index
    ``memorymessage_session`` (``session_id, message_id``), whatever the history.
    """
    if core.tenant_id != tenant.pk:
        raise NotFound(f"no memory core {core.pk!r}")
    if not isinstance(session_id, str) or not session_id:
        return None
    rows = (
        MemoryMessage.objects.filter(tenant=tenant, unit__core=core, session_id=session_id)
        .filter(~Q(session_id=""))  # the partial index's condition, spelled as it is
        .exclude(message_id="")
    )
    if before is not None:
        rows = rows.filter(message_id__lt=before)
    newest: str | None = rows.order_by("-message_id").values_list("message_id", flat=True).first()
    return newest


def rolled_among(
    *, tenant: Tenant, core: MemoryCore, messages: Sequence[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Those of ``messages`` (``(session id, message id)`` pairs) that the core has
    rolled (one of its units holds them). One read of the index ``memorymessage_session``
    per session and 500 ids."""
    if core.tenant_id != tenant.pk:
        raise NotFound(f"no memory core {core.pk!r}")
    by_session: dict[str, list[str]] = defaultdict(list)
    for session_id, message_id in messages:
        by_session[session_id].append(message_id)
    rolled: set[tuple[str, str]] = set()
    for session_id, ids in by_session.items():
        for start in range(0, len(ids), 500):
            found = MemoryMessage.objects.filter(
                tenant=tenant,
                unit__core=core,
                session_id=session_id,
                message_id__in=ids[start : start + 500],
            ).values_list("message_id", flat=True)
            rolled.update((session_id, message_id) for message_id in found)
    return rolled


def history_block(
    *, core: MemoryCore, unit: MemoryUnit, newest_first: list[MemorySlice], older: bool = False
) -> dict[str, Any]:
    """The block for the core's digest and these slices (newest first), within the
    character budget. ``older``: the core holds slices, not condensed, older than these
    (so does it when the budget leaves some out)."""
    kept, left_out = fit_history(newest_first, digest=history_digest_line(core))
    older = older or bool(left_out)
    kept.reverse()
    return history_block_wire(core=core, unit=unit, oldest_first=kept, older=older)


def fit_history(
    newest_first: Sequence[MemorySlice],
    *,
    digest: Sized | None,
    line_length: Callable[[MemorySlice], int] | None = None,
) -> tuple[list[MemorySlice], list[MemorySlice]]:
    """The slices the block shows after its ``digest`` line (None: no digest), newest
    first, and those it has no room for: at most ``FORGE_MEMORY_HISTORY_SLICES``, while
    the lines stay within ``FORGE_MEMORY_HISTORY_CHARS`` (the newest is shown whatever
    its length). What is left out is a suffix: the oldest. ``memory.digest`` condenses
    exactly that, by the same rule, so the block's selection and the digest agree. The
    budget holds the block's whole text: its first line (the longer of the two) too.

    ``line_length``: a slice's line's length, when its summary was not read (the
    digest's check reads only the lengths)."""
    budget = int(getattr(settings, "FORGE_MEMORY_HISTORY_CHARS", HISTORY_CHARS))
    budget -= len(HISTORY_HEAD_OLDER) + 2
    if digest is not None:
        budget -= len(digest) + 2
    kept: list[MemorySlice] = []
    for item in newest_first[: history_slices()]:
        length = line_length(item) if line_length else len(history_line(item))
        if kept and budget - length < 0:
            break
        budget -= length + 2
        kept.append(item)
    return kept, list(newest_first[len(kept) :])


# --- search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageHit:
    """A best-matching message inside a hit, with a snippet around the match."""

    message: MemoryMessage
    snippet: str

    @property
    def index(self) -> int:
        return self.message.index


@dataclass(frozen=True)
class SliceHit:
    slice: MemorySlice  # with ``unit`` and ``unit.core`` loaded
    rank: int  # 1 = best; a position, never a score (scores would tell of other tenants)
    messages: tuple[MessageHit, ...] = ()  # best first
    by_words: bool = True  # the full text matched it; False: found by meaning alone

    def wire(self) -> dict[str, Any]:
        return hit_wire(
            self.slice,
            self.rank,
            ((m.message, m.snippet) for m in self.messages),
            by_words=self.by_words,
        )


def slices_holding(slices: QuerySet[MemorySlice], query: str) -> QuerySet[MemorySlice]:
    """Of ``slices``, those whose indexed text (summary and the raw messages of their
    range) holds every word of ``query`` as search reads it: case and accents folded,
    Chinese and Japanese matched inside words (``memory.text``), stop words left out.
    Not ranked; none for a query of no words or over ``QUERY_MAX`` characters. The
    admin's slice search (``icontains`` on the summary alone matched none of these)."""
    try:
        words = search.required(query)
    except InvalidQuery:
        return slices.none()
    if not words:
        return slices.none()
    sql, params = search.holding_all(words)
    return slices.filter(pk__in=RawSQL(sql, params))  # noqa: S611 (bound parameters)


def search_slices(
    *,
    tenant: Tenant,
    query: str,
    user: AbstractBaseUser | None = None,
    agent: str | None = None,
    limit: int = SEARCH_LIMIT,
) -> list[SliceHit]:
    """Slices of the tenant that match ``query`` by their summary or raw messages, in
    words or in meaning, best first, ranked 1, 2, 3 … (``memory.search``), each with
    its best-matching messages.

    The searched memory is the tenant's cores, narrowed to ``user`` and ``agent`` when
    given (the ``memory_search`` tool: the speaker's core with this agent). The answer
    depends on the searched memory alone, never on other tenants'. Query syntax is
    not interpreted. A query with no tokens (empty, only stop words, emoji or
    punctuation) gives ``[]``; one over ``QUERY_MAX`` characters, or a limit outside
    1..100, raises ``InvalidQuery``. An embedder that fails gives full-text results.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= search.LIMIT_MAX:
        raise InvalidQuery(f"limit must be an integer from 1 to {search.LIMIT_MAX}")
    if agent is not None and not isinstance(agent, str):
        raise InvalidQuery("agent must be a name")
    words = search.terms(query)
    if not words:
        return []
    cores = MemoryCore.objects.filter(tenant=tenant)
    if user is not None:
        cores = cores.filter(user_id=user.pk)
    if agent is not None:
        cores = cores.filter(agent=agent)
    core_ids = cores.order_by(F("last_interaction_at").desc(nulls_last=True), "-id").values_list(
        "pk", flat=True
    )
    scope = search.Scope(
        tenant_id=tenant.pk,
        core_ids=tuple(core_ids),
        whole_tenant=user is None and agent is None,
    )
    found = search.search(scope=scope, query=query, limit=limit)
    if not found:
        return []
    slices = MemorySlice.objects.select_related("unit", "unit__core").in_bulk(
        [f.slice_id for f in found]
    )
    kept = [
        (f, slices[f.slice_id])
        for f in found
        if f.slice_id in slices and slices[f.slice_id].tenant_id == tenant.pk
    ]
    # The messages wanted, in one query: each unit with its indexes (not every unit with
    # every index: at 10 hits of 3 messages that read ~300 rows).
    wanted: dict[str, set[int]] = defaultdict(set)
    for f, item in kept:
        if f.messages:
            wanted[item.unit_id].update(f.messages)
    rows: dict[tuple[str, int], MemoryMessage] = {}
    if wanted:
        which = Q()
        for unit_id, indexes in wanted.items():
            which |= Q(unit_id=unit_id, index__in=sorted(indexes))
        rows = {(m.unit_id, m.index): m for m in MemoryMessage.objects.filter(which, tenant=tenant)}
    hits: list[SliceHit] = []
    for rank, (f, item) in enumerate(kept, 1):
        messages = tuple(
            MessageHit(message=row, snippet=search.snippet(row.text, words))
            for index in f.messages
            if (row := rows.get((item.unit_id, index))) is not None
        )
        hits.append(SliceHit(slice=item, rank=rank, messages=messages, by_words=f.by_words))
    return hits
