"""Operators walk cores → units → slices; staff see only their tenants' memory."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from accounts.models import Membership, Tenant, User
from memory import services
from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit

from .conftest import roll_committed, talk

pytestmark = pytest.mark.django_db


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:memory_{name}", args=args)


@pytest.fixture
def rolled(tenant: Any, user: Any) -> MemoryCore:
    core = talk(tenant=tenant, user=user, turns=3)
    roll_committed(core)  # turns 0-1 (keep 2: turn 2 stays unrolled)
    talk(tenant=tenant, user=user, turns=3, first=3)
    roll_committed(core)  # turns 2-4 (turn 5 stays unrolled)
    return core


def staff_client(tenant: Tenant, username: str) -> Client:
    staff = User.objects.create_user(username=username, password="pw-staff-123", is_staff=True)
    Membership.objects.create(tenant=tenant, user=staff)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="memory"))
    client = Client()
    client.force_login(staff)
    return client


def test_walk_from_a_core_to_the_raw_messages_of_a_slice(admin_client, rolled):
    listing = admin_client.get(url("memorycore_changelist"))
    assert listing.status_code == 200
    assert rolled.pk in listing.text
    core_page = admin_client.get(url("memorycore_change", rolled.pk))
    assert core_page.status_code == 200
    unit = MemoryUnit.objects.get(core=rolled)
    assert url("memoryunit_change", unit.pk) in core_page.text
    unit_page = admin_client.get(url("memoryunit_change", unit.pk))
    assert unit_page.status_code == 200
    _first, second = MemorySlice.objects.order_by("created_at")
    assert url("memoryslice_change", second.pk) in unit_page.text
    assert "Question 4 about topic4" in unit_page.text  # the unit's messages
    slice_page = admin_client.get(url("memoryslice_change", second.pk))
    assert slice_page.status_code == 200
    assert "[4, 10)" in slice_page.text
    assert second.summary.splitlines()[0] in slice_page.text
    for message in MemoryMessage.objects.filter(unit=unit):
        shown = message.text in slice_page.text
        assert shown == (4 <= message.index < 10), message.index


def test_lists_search_filter_and_count(admin_client, rolled, tenant, user):
    talk(tenant=tenant, user=user, agent="explore", turns=1)
    listing = admin_client.get(url("memorycore_changelist"), {"agent": "explore"})
    assert listing.status_code == 200
    assert rolled.pk not in listing.text
    counted = admin_client.get(url("memorycore_changelist"), {"agent": "build"})
    assert rolled.pk in counted.text
    assert '<td class="field-slice_total">2</td>' in counted.text
    assert '<td class="field-message_total">10</td>' in counted.text
    by_tenant = admin_client.get(url("memorycore_changelist"), {"tenant__id__exact": tenant.pk})
    assert rolled.pk in by_tenant.text
    found = admin_client.get(url("memoryslice_changelist"), {"q": "topic4"})
    assert MemorySlice.objects.order_by("created_at")[1].pk in found.text
    assert MemorySlice.objects.order_by("created_at")[0].pk not in found.text
    messages = admin_client.get(url("memorymessage_changelist"), {"q": "topic2"})
    assert messages.status_code == 200
    assert "Answer 2 on topic2" in messages.text
    dated = admin_client.get(
        url("memoryslice_changelist"), {"created_at__gte": "2000-01-01 00:00:00+00:00"}
    )
    assert dated.status_code == 200
    assert admin_client.get(url("dialoguemessage_changelist")).status_code == 200


def test_slices_and_messages_are_read_only(admin_client, rolled):
    item = MemorySlice.objects.first()
    assert item is not None
    page = admin_client.get(url("memoryslice_change", item.pk))
    assert 'name="_save"' not in page.text
    assert (
        admin_client.post(url("memoryslice_change", item.pk), {"summary": "x"}).status_code == 403
    )
    assert admin_client.post(url("memoryslice_delete", item.pk), {"post": "yes"}).status_code == 403
    assert admin_client.get(url("memoryslice_add")).status_code == 403
    assert admin_client.get(url("memorycore_add")).status_code == 403
    message = MemoryMessage.objects.first()
    assert message is not None
    assert (
        admin_client.post(url("memorymessage_delete", message.pk), {"post": "yes"}).status_code
        == 403
    )
    assert MemorySlice.objects.filter(pk=item.pk, summary=item.summary).exists()


def test_staff_of_another_tenant_see_nothing_of_it(rolled, tenant, other_tenant, other_user):
    client = staff_client(other_tenant, "globex-staff")
    unit = MemoryUnit.objects.get(core=rolled)
    item = MemorySlice.objects.first()
    assert item is not None
    for name in ("memorycore", "memoryunit", "memoryslice", "memorymessage", "dialoguemessage"):
        page = client.get(url(f"{name}_changelist"))
        assert page.status_code == 200
        assert rolled.pk not in page.text
        assert unit.pk not in page.text
        assert "topic" not in page.text
        assert "acme" not in page.text  # not even the tenant's name in a filter
    for name, pk in (("memorycore", rolled.pk), ("memoryunit", unit.pk), ("memoryslice", item.pk)):
        page = client.get(url(f"{name}_change", pk), follow=True)
        assert "topic" not in page.text
        assert "doesn\u2019t exist" in page.text
    assert client.post(url("memorycore_delete", rolled.pk), {"post": "yes"}).status_code in (
        302,
        404,
    )
    assert MemoryCore.objects.filter(pk=rolled.pk).exists()
    # Their own tenant's staff see it.
    own = staff_client(tenant, "acme-staff")
    assert rolled.pk in own.get(url("memorycore_changelist")).text


def roll_now(client: Client, core: MemoryCore) -> Any:
    """The changelist's "roll now" action on ``core``, its redirect followed."""
    return client.post(
        url("memorycore_changelist"),
        {"action": "roll_now", "_selected_action": [core.pk]},
        follow=True,
    )


def test_roll_now_action_rolls_with_the_same_engine(tenant, user, settings):
    settings.FORGE_MEMORY_ROLL_KEEP = 8
    core = talk(tenant=tenant, user=user, turns=5)  # 10 messages, under the threshold
    client = staff_client(tenant, "acme-operator")
    response = roll_now(client, core)
    assert response.status_code == 200
    assert "Rolled 1 core." in response.text
    item = MemorySlice.objects.get()
    assert (item.start_index, item.end_index) == (0, 2)  # all but the 8 newest
    assert item.unit.core_id == core.pk


def test_roll_now_says_why_a_small_core_was_not_rolled(tenant, user, settings):
    """QA (LOW): an operator who asked to roll a core of 8 messages was told "not due",
    not why: rolling keeps the newest ``keep`` messages, and there was nothing older."""
    settings.FORGE_MEMORY_ROLL_KEEP = 8
    core = talk(tenant=tenant, user=user, turns=4)  # 8 messages
    client = staff_client(tenant, "acme-operator")
    response = roll_now(client, core)
    assert "Rolled 0 cores." in response.text
    assert (
        f"Core {core.pk}: not rolled: its window holds 8 messages, and rolling keeps the "
        "newest 8 (FORGE_MEMORY_ROLL_KEEP)"
    ) in response.text
    assert not MemorySlice.objects.exists()
    # One message past keep, in the turn the kept one is in: a turn is never split.
    settings.FORGE_MEMORY_ROLL_KEEP = 1
    one_turn = talk(tenant=tenant, user=user, agent="other", turns=1)  # 2 messages
    response = roll_now(client, one_turn)
    assert "Rolled 0 cores." in response.text
    assert (
        f"Core {one_turn.pk}: not rolled: its window holds 2 messages; rolling keeps the "
        "newest 1 (FORGE_MEMORY_ROLL_KEEP) and never splits a turn"
    ) in response.text


def test_a_core_is_deleted_as_a_whole(admin_client, rolled):
    confirm = admin_client.get(url("memorycore_delete", rolled.pk))
    assert confirm.status_code == 200
    assert "Memory messages: 10" in confirm.text
    response = admin_client.post(url("memorycore_delete", rolled.pk), {"post": "yes"})
    assert response.status_code == 302
    for model in (MemoryCore, MemoryUnit, MemorySlice, MemoryMessage, DialogueMessage):
        assert not model.objects.exists()


def test_slice_search_folds_accents_and_finds_words_inside_chinese_and_raw_messages(
    admin_client, tenant, user, other_tenant, other_user
):
    """The admin's slice search reads what memory search reads: "cafe zurich" finds a
    slice that says "Café" and "Zürich", 咖啡 one whose messages say 我昨天喝了咖啡,
    and another tenant's slices stay out (an ``icontains`` on the summary found none)."""
    said = [
        ("user", "We met at the Café Odéon in Zürich last spring."),
        ("assistant", "Noted: the Café Odéon, Zürich."),
        ("user", "\u6211\u6628\u5929\u559d\u4e86\u5496\u5561\u3002"),  # I had coffee yesterday
        ("assistant", "\u597d\u7684\u3002"),
        ("user", "Something else entirely."),
        ("assistant", "Fine."),
        ("user", "One more."),
        ("assistant", "Sure."),
    ]
    core = None
    for owner, owner_tenant in ((user, tenant), (other_user, other_tenant)):
        core = services.append_dialogue(
            tenant=owner_tenant,
            user=owner,
            agent="build",
            messages=[{"role": role, "text": text} for role, text in said],
        )
        roll_committed(core)
    mine = MemorySlice.objects.filter(tenant=tenant).get()
    theirs = MemorySlice.objects.filter(tenant=other_tenant).get()

    def found(q: str) -> set[str]:
        page = admin_client.get(url("memoryslice_changelist"), {"q": q})
        assert page.status_code == 200
        return {pk for pk in (mine.pk, theirs.pk) if pk in page.text}

    # The superuser sees both tenants; a staff member of one tenant sees its own only.
    assert found("cafe zurich") == {mine.pk, theirs.pk}
    assert found("\u5496\u5561") == {mine.pk, theirs.pk}  # coffee, inside a sentence
    assert found("cafe tokyo") == set()  # every word, not any
    assert found("tokyo") == set()
    assert found(mine.pk) == {mine.pk}  # ids still match exactly
    staff = staff_client(tenant, "memory-staff")
    page = staff.get(url("memoryslice_changelist"), {"q": "odeon"})
    assert page.status_code == 200
    assert mine.pk in page.text
    assert theirs.pk not in page.text


def test_a_search_of_a_thousand_words_reads_the_first_words_not_a_500(admin_client, rolled):
    """QA: Django's admin search ANDs every word, so 1,000 words made an expression SQLite
    refuses ("Expression tree is too large"): a 500 on every searchable list."""
    pasted = "topic4 " + "cafe " * 1000
    for name in ("memoryslice_changelist", "memorymessage_changelist", "memorycore_changelist"):
        page = admin_client.get(url(name), {"q": pasted})
        assert page.status_code == 200, name
    found = admin_client.get(url("memoryslice_changelist"), {"q": "topic4 " + "topic4 " * 1000})
    assert MemorySlice.objects.order_by("created_at")[1].pk in found.text
    for name in ("accounts_user", "accounts_tenant", "forge_agent", "forge_sessions_session"):
        page = admin_client.get(reverse(f"admin:{name}_changelist"), {"q": pasted})
        assert page.status_code == 200, name
