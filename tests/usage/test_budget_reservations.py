"""Replies still running hold budget: prompts sent at once no longer all pass a check that
counted finished replies only (a third-round finding: 40 concurrent prompts against a
300-token budget all ran). Real turns, real threads, both engines."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from forge.models import SessionLease
from forge.runtime import start_turn
from forge.runtime.prompting import begin
from forge.usage.budgets import BudgetExceeded
from forge.usage.services import record_reply, set_budget
from sessions.models import SessionEvent
from sessions.services import create_session
from tests.runtime.test_turns import text_reply

from .helpers import reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def offline(settings, agents):
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_BUDGET_RESERVE_TOKENS = 1000


def used(session, tokens: int) -> None:
    """A finished reply of ``tokens`` tokens in ``session``, counted."""
    _opened, done = reply(session, steps=[{"tokens": {"input": tokens, "output": 0}, "cost": 0}])
    record_reply(session=session, info=done)


def sessions_of(user, n: int) -> list[Any]:
    return [create_session(user=user, title=f"chat {i}") for i in range(n)]


def test_prompts_sent_at_once_let_in_what_the_budget_holds(offline, user):
    """Eight threads, eight sessions, one barrier: each prompt's check and reservation are
    serialized per tenant, so the first turn's reservation (the fallback, 1,000 tokens)
    holds the 100-token budget and the seven others are refused, writing nothing."""
    set_budget(tenant=user.tenants.get(), monthly_tokens=100)
    chats = sessions_of(user, 8)
    barrier = threading.Barrier(len(chats))
    outcomes: list[str] = []

    def send(session: Any) -> None:
        try:
            barrier.wait()
            begin(session, "hello", None, [], speaker=user)
            outcomes.append("in")
        except BudgetExceeded as exc:
            outcomes.append("refused" if "held by replies still running" in str(exc) else "?")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(chat,)) for chat in chats]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["in"] + ["refused"] * 7
    assert SessionLease.objects.count() == 1  # the refused took no lease
    assert SessionEvent.objects.filter(type="message.updated").count() == 2  # one prompt


def test_a_running_reply_holds_the_speakers_average_reply(offline, user):
    """After finished replies, a running one holds their average: 20 used of 100, and
    four turns of 20 each already running, leave nothing for a fifth."""
    tenant = user.tenants.get()
    chats = sessions_of(user, 6)
    used(chats[0], 20)
    set_budget(tenant=tenant, monthly_tokens=100)
    for chat in chats[1:5]:
        begin(chat, "hello", None, [], speaker=user)
    assert set(SessionLease.objects.values_list("reserved_tokens", flat=True)) == {20}
    with pytest.raises(BudgetExceeded) as refused:
        begin(chats[5], "hello", None, [], speaker=user)
    error = refused.value
    assert error.running == 4
    assert error.extra["running"] == 4
    assert 0 < error.retry_after <= 15  # soon: when they finish, not at the month's end
    assert "(20 used, 80 reserved by 4 running)" in str(error)


def test_a_users_own_budget_counts_only_their_running_replies(offline, user, tenant):
    from accounts.models import Membership, User

    bob = User.objects.create_user(username="bob", password="pw-bob-1234")
    Membership.objects.create(tenant=tenant, user=bob)
    set_budget(tenant=tenant, user=user, monthly_tokens=100)
    begin(create_session(user=bob, title="bob's"), "hi", None, [], speaker=bob)  # no budget
    assert SessionLease.objects.get().reserved_by is None
    mine = sessions_of(user, 2)
    begin(mine[0], "hi", None, [], speaker=user)
    with pytest.raises(BudgetExceeded):
        begin(mine[1], "hi", None, [], speaker=user)


def test_a_user_budget_alone_holds_the_tenants_average_when_the_speaker_has_none(
    offline, user, tenant
):
    """As docs/operations.md says: the speaker's average, else the tenant's. With a user
    budget and no tenant budget, the tenant's average was never read, and the turn held
    the 1,000-token fallback (QA)."""
    from accounts.models import Membership, User

    bob = User.objects.create_user(username="bob", password="pw-bob-1234")
    Membership.objects.create(tenant=tenant, user=bob)
    used(create_session(user=bob, title="bob's"), 80)  # the tenant's replies: 80 each
    set_budget(tenant=tenant, user=user, monthly_tokens=150)
    begin(create_session(user=user, title="mine"), "hi", None, [], speaker=user)
    assert SessionLease.objects.get().reserved_tokens == 80


def test_a_dead_turns_reservation_is_freed_with_its_lease(offline, user):
    """A process that died mid-turn holds nothing once its lease expires, and the turn that
    takes the session over holds only its own estimate."""
    set_budget(tenant=user.tenants.get(), monthly_tokens=100)
    first, second = sessions_of(user, 2)
    begin(first, "hi", None, [], speaker=user)
    with pytest.raises(BudgetExceeded):
        begin(second, "hi", None, [], speaker=user)
    SessionLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    begin(second, "hi", None, [], speaker=user)
    taken = SessionLease.objects.filter(session=first)
    taken.update(reserved_tokens=777, expires_at=timezone.now() - timedelta(seconds=1))
    SessionLease.objects.filter(session=second).delete()  # that turn ended
    begin(first, "again", None, [], speaker=user)  # takes over the expired lease
    assert taken.get().reserved_tokens == 1000


def test_without_budgets_nothing_is_reserved(offline, user):
    begin(sessions_of(user, 1)[0], "hi", None, [], speaker=user)
    lease = SessionLease.objects.get()
    assert (lease.reserved_by, lease.reserved_tokens, lease.reserved_cost_nanos) == (None, 0, 0)


def test_a_cost_budget_holds_the_fallback_at_the_models_input_price(offline, user, settings):
    settings.FORGE_MODEL_PRICES = {"offline/echo": {"input": 2.0, "output": 8.0}}
    set_budget(tenant=user.tenants.get(), monthly_cost="0.002")
    first, second = sessions_of(user, 2)
    begin(first, "hi", None, [], speaker=user)
    assert SessionLease.objects.get().reserved_cost_nanos == 2_000_000  # 1,000 at $2/M
    with pytest.raises(BudgetExceeded) as refused:
        begin(second, "hi", None, [], speaker=user)
    assert "0.002 reserved by 1 running" in str(refused.value)


async def test_a_finished_reply_frees_its_reservation(offline, user, script):
    """Through the runtime: while a slow reply runs, a prompt in another session is
    refused; once it finished (40 tokens of 100), the next one runs."""
    script(
        [
            [
                {"type": "sleep", "seconds": 0.5},
                *text_reply("slow", usage={"input": 30, "output": 10}),
            ],
            text_reply("next"),
        ]
    )
    tenant = await sync_to_async(user.tenants.get)()
    await sync_to_async(set_budget)(tenant=tenant, monthly_tokens=100)
    first, second = await sync_to_async(sessions_of)(user, 2)
    running = await start_turn(session=first, text="one", speaker=user)
    with pytest.raises(BudgetExceeded):
        await start_turn(session=second, text="two", speaker=user)
    await asyncio.wait_for(running.task, 10)
    assert not await sync_to_async(SessionLease.objects.exists)()
    done = await start_turn(session=second, text="two", speaker=user)
    await asyncio.wait_for(done.task, 10)
