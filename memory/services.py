"""All writes to the memory store.

Every function is keyword-only, typed and atomic; bad input raises a
``MemoryStoreError`` subclass (with its ``code``) before anything is written.

* :func:`append_dialogue` — one turn's messages into the dialogue window of
  (tenant, user, agent); creates the core on first use.
* :func:`append_to_window` — the runtime's entry: the same on a core that exists, in
  one statement (the first turn falls back to :func:`append_dialogue`).
* :func:`update_memory_unit` — the seed's ``updateMemoryUnit(messages, summary)``:
  append messages to the unit of the core's current memory session and make a
  slice covering exactly them.
* :func:`restore_unit` — write a whole unit from its wire shape, normalized.
* :func:`roll_core` — DialogRolling of one core now (the admin's "roll now");
  ``roll_dialogs`` sweeps with the same engine (``memory.rolling``).
* :func:`delete_core` — a core with its window, units, messages and slices.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import F

from accounts.models import Tenant
from accounts.selectors import is_member

from . import digest, search, sql, turn_sql
from .exceptions import InvalidInput, NotFound, TenantMismatch
from .ids import new_slice_id, new_unit_id
from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .normalize import Msg, clean_agent, clean_messages, clean_summary, normalize_unit
from .times import now_ms
from .vectors import Doc

if TYPE_CHECKING:
    from .rolling import RollOutcome
    from .summarizers import Summarizer


def _check_core(tenant: Tenant, core: MemoryCore) -> None:
    if core.tenant_id != tenant.pk:
        raise NotFound(f"no memory core {core.pk!r}")


# --- the dialogue window ---------------------------------------------------------------


def _lock_core(tenant: Tenant, user: AbstractBaseUser, agent: str) -> MemoryCore:
    """The core of (tenant, user, agent), locked for this transaction; created if missing.

    Concurrent first turns both insert with ON CONFLICT DO NOTHING, then both lock
    the one row that exists.
    """
    cores = MemoryCore.objects.select_for_update(no_key=True).filter(
        tenant=tenant, user_id=user.pk, agent=agent
    )
    core = cores.first()
    if core is None:
        MemoryCore.objects.bulk_create(
            [MemoryCore(tenant=tenant, user_id=user.pk, agent=agent)], ignore_conflicts=True
        )
        core = cores.get()
    return core


def append_dialogue(
    *,
    tenant: Tenant,
    user: AbstractBaseUser,
    agent: str,
    messages: Sequence[Mapping[str, Any]],
) -> MemoryCore:
    """Append one turn's messages (``{role, text, at?, session_id?, message_id?}``, oldest
    first) to the dialogue window of (tenant, user, agent), creating the core on first use.

    Three statements whatever the core's history: lock (or create) the core row,
    insert the messages, advance the window's counters. Concurrent turns of one
    core queue on the core's row lock, so their messages never interleave or
    share a ``seq``. Meant to run inside the transaction that completes a reply.
    """
    agent = clean_agent(agent)
    now = now_ms()
    rows = clean_messages(messages, now=now)
    if not is_member(user=user, tenant=tenant):
        raise TenantMismatch(f"user {user.get_username()!r} is not a member of tenant {tenant}")
    with transaction.atomic():
        core = _lock_core(tenant, user, agent)
        if not rows:
            return core
        start = core.window_next_seq
        DialogueMessage.objects.bulk_create(
            [
                DialogueMessage(
                    tenant=tenant,
                    core=core,
                    seq=start + i,
                    role=m.role,
                    text=m.text,
                    at=m.at,
                    session_id=m.session_id,
                    message_id=m.message_id,
                )
                for i, m in enumerate(rows)
            ]
        )
        MemoryCore.objects.filter(pk=core.pk).update(
            window_next_seq=start + len(rows),
            window_count=F("window_count") + len(rows),
            last_interaction_at=now,
        )
    core.window_next_seq = start + len(rows)
    core.window_count += len(rows)
    core.last_interaction_at = now
    return core


def append_to_window(
    *, tenant_id: int, user_id: int, agent: str, messages: Sequence[Mapping[str, Any]]
) -> bool:
    """:func:`append_dialogue` for a turn, on a core that exists, without the ORM: the
    membership check, the core's lock, the insert and the counters in one statement on
    PostgreSQL (two on SQLite; ``turn_sql.append_window``). False, with nothing written,
    when the core is not there yet or ``user_id`` is no member of the tenant: the
    caller then calls :func:`append_dialogue` (which creates the core, or refuses the
    non-member). Meant to run inside the transaction that completes a reply.
    """
    agent = clean_agent(agent)
    now = now_ms()
    rows = clean_messages(messages, now=now)
    if not rows:
        return True
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        return turn_sql.append_window(
            cursor,
            sql.Dialect(cursor),
            tenant_id=tenant_id,
            user_id=user_id,
            agent=agent,
            messages=rows,
            now=now,
        )


def replace_in_window(
    *, tenant_id: int, user_id: int, agent: str, replaced: str, message: Mapping[str, Any]
) -> bool:
    """A regenerated answer in the place of the answer it regenerates (``replaced``, a
    message id of the same session), in the window of the core of (tenant, user, agent),
    while that answer is not rolled yet: memory then holds the answer the chat shows,
    not both. False, with nothing written, when the window no longer holds it (rolled
    already: the unit keeps what was said then, and the caller appends the new answer)
    or there is no such core. Meant to run inside the transaction that completes the
    reply.

    A rolling that snapshotted the window before this replacement commits the answer it
    read (the old one) and trims the row: memory then holds the old answer alone, as it
    did before it could be replaced (a race of one regeneration with one rolling)."""
    agent = clean_agent(agent)
    now = now_ms()
    rows = clean_messages([message], now=now)
    if not rows:
        return False
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        return turn_sql.replace_in_window(
            cursor,
            sql.Dialect(cursor),
            tenant_id=tenant_id,
            user_id=user_id,
            agent=agent,
            replaced=replaced,
            message=rows[0],
            now=now,
        )


# --- units and slices ----------------------------------------------------------------------


def update_memory_unit(
    *,
    tenant: Tenant,
    core: MemoryCore,
    messages: Sequence[Mapping[str, Any]],
    summary: str,
) -> tuple[MemoryUnit, MemorySlice]:
    """Append ``messages`` to the unit of the core's current memory session (created if
    needed) and create a slice ``[start, start + len(messages))`` with ``summary``.

    Leaves the dialogue window alone (rolling does that); for plugins and imports. The
    slice (summary and messages: full text, then vectors) is indexed for search once
    the transaction commits, and what the ``dialog_history`` block then has no room
    for is folded into the core's history digest (``memory.digest``), as after a
    rolling.
    """
    _check_core(tenant, core)
    now = now_ms()
    rows = clean_messages(messages, now=now, limit=None)
    if not rows:
        raise InvalidInput("a slice covers at least one message")
    text = clean_summary(summary)
    if not text:
        raise InvalidInput("a summary must not be empty")
    with transaction.atomic(), connection.cursor() as cursor:
        dialect = sql.Dialect(cursor)
        locked = sql.lock_core(cursor, dialect, core.pk)
        if locked is None:
            raise NotFound(f"no memory core {core.pk!r}")
        unit_id = locked.unit_id or new_unit_id()
        slice_id = new_slice_id()
        sql.run(
            cursor,
            dialect,
            sql.append_to_unit(
                dialect,
                core_id=core.pk,
                locked=locked,
                unit_id=unit_id,
                slice_id=slice_id,
                messages=rows,
                summary=text,
                now=now,
            ),
        )
        doc = Doc(
            slice_id=slice_id,
            tenant_id=locked.tenant_id,
            core_id=core.pk,
            start_index=locked.unit_message_count,
            summary=text,
            messages=tuple(m.text for m in rows),
        )
        transaction.on_commit(partial(search.index_slice, doc=doc))
        digest.condense_on_commit(tenant_id=locked.tenant_id, core_id=core.pk)
    return MemoryUnit.objects.get(pk=unit_id), MemorySlice.objects.get(pk=slice_id)


@transaction.atomic
def restore_unit(*, tenant: Tenant, core: MemoryCore, unit: Mapping[str, Any]) -> MemoryUnit:
    """Write a unit from its wire shape (an export, another store), normalized first:
    ids and times filled, ranges clamped, slices ordered and made not to overlap.

    The unit's id and memory session must be new to the core. Its slices are indexed
    for search (full text, then vectors) once the transaction commits, and what the
    ``dialog_history`` block then has no room for (a restored unit's older slices, by
    its ``updated_at``) is folded into the core's history digest (``memory.digest``).
    """
    _check_core(tenant, core)
    data = normalize_unit(unit, now=now_ms())
    if (
        MemoryUnit.objects.filter(pk=data["id"]).exists()
        or MemoryUnit.objects.filter(
            core=core, memory_session_id=data["memory_session_id"]
        ).exists()
    ):
        raise InvalidInput(f"unit {data['id']!r} or its memory session exists already")
    slice_ids = [s["id"] for s in data["slices"]]
    if MemorySlice.objects.filter(pk__in=slice_ids).exists():
        raise InvalidInput("a slice of this unit exists already")
    messages: list[Msg] = data["conversation_messages"]
    created = MemoryUnit.objects.create(
        id=data["id"],
        tenant=tenant,
        core=core,
        memory_session_id=data["memory_session_id"],
        created_at=min([data["updated_at"], *(m.at for m in messages)]),
        updated_at=data["updated_at"],
        message_count=len(messages),
        slice_count=len(data["slices"]),
    )
    MemoryMessage.objects.bulk_create(
        [
            MemoryMessage(
                tenant=tenant,
                unit=created,
                index=i,
                role=m.role,
                text=m.text,
                at=m.at,
                session_id=m.session_id,
                message_id=m.message_id,
            )
            for i, m in enumerate(messages)
        ],
        batch_size=500,
    )
    MemorySlice.objects.bulk_create(
        [MemorySlice(tenant=tenant, unit=created, **s) for s in data["slices"]], batch_size=500
    )
    transaction.on_commit(partial(search.index_slices, slice_ids))
    digest.condense_on_commit(tenant_id=tenant.pk, core_id=core.pk)
    return created


# --- rolling and deleting --------------------------------------------------------------------


def roll_core(
    *,
    tenant: Tenant,
    core: MemoryCore,
    force: bool = True,
    threshold: int | None = None,
    keep: int | None = None,
    idle_after: timedelta | float | None = None,
    summarizer: Summarizer | None = None,
) -> RollOutcome:
    """DialogRolling of one core, now: with ``force`` (the default) whatever is not yet in
    a unit is rolled even under the threshold (an idle core rolls as idle); without it,
    only when due. See ``memory.rolling.roll`` for the steps and the outcome."""
    from .rolling import RollingOptions, roll
    from .signals import send_rollings_done

    _check_core(tenant, core)
    options = RollingOptions.build(threshold=threshold, keep=keep, idle_after=idle_after)
    started = time.monotonic()
    outcome = roll(core.pk, options=options, force=force, summarizer=summarizer)
    send_rollings_done([outcome], time.monotonic() - started)
    return outcome


@transaction.atomic
def delete_core(*, tenant: Tenant, core: MemoryCore) -> dict[str, int]:
    """Delete the core with its window, units, messages and slices (and their index
    entries). Returns how many rows of each went."""
    _check_core(tenant, core)
    if not MemoryCore.objects.select_for_update().filter(tenant=tenant, pk=core.pk).exists():
        raise NotFound(f"no memory core {core.pk!r}")
    units = MemoryUnit.objects.filter(tenant=tenant, core=core)
    counts = {
        "messages": MemoryMessage.objects.filter(tenant=tenant, unit__in=units).delete()[0],
        # (their vectors go with them: MemoryVectors cascades)
        "slices": MemorySlice.objects.filter(tenant=tenant, unit__in=units)
        .delete()[1]
        .get(MemorySlice._meta.label, 0),
        "window": DialogueMessage.objects.filter(tenant=tenant, core=core).delete()[0],
        "units": units.delete()[0],
    }
    MemoryCore.objects.filter(pk=core.pk).delete()
    counts["cores"] = 1
    return counts
