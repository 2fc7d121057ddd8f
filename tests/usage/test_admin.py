"""Budgets in the admin: validated, shown with the month's use; usage read-only."""

from __future__ import annotations

import pytest
from django.urls import reverse

from forge.models import Budget
from forge.usage.services import record_reply

from .helpers import reply

pytestmark = pytest.mark.django_db


def test_a_budget_is_added_validated_and_shown_with_its_use(admin_client, session, tenant):
    url = reverse("admin:forge_budget_add")
    for bad, field in (
        ({"monthly_cost": "-1"}, "monthly_cost"),
        ({"monthly_tokens": "many"}, "monthly_tokens"),
        # As set_budget refuses them (QA: the form took 9e18 tokens).
        ({"monthly_tokens": "9000000000000000000"}, "monthly_tokens"),
        ({"monthly_cost": "100000000000000"}, "monthly_cost"),
        # As set_budget refuses them (QA: the form's field had read them as numbers).
        ({"monthly_tokens": "\uff15"}, "monthly_tokens"),
        ({"monthly_tokens": "5_000"}, "monthly_tokens"),
        ({"monthly_cost": "\u0663"}, "monthly_cost"),
    ):
        page = admin_client.post(url, {"tenant": tenant.pk, **bad})
        assert page.status_code == 200
        assert field in page.context["adminform"].form.errors
    page = admin_client.post(url, {"tenant": tenant.pk})
    assert "set a monthly limit" in page.text
    assert not Budget.objects.exists()
    assert admin_client.post(url, {"tenant": tenant.pk, "monthly_tokens": "500"}).status_code == 302
    # A second one for the tenant says so (QA: "Constraint “budget_tenant” is violated.").
    again = admin_client.post(url, {"tenant": tenant.pk, "monthly_tokens": "900"})
    assert "This tenant already has a budget: edit that one." in again.text
    assert Budget.objects.count() == 1
    _opened, done = reply(session, steps=[{"tokens": {"input": 120, "output": 3}, "cost": 0.5}])
    record_reply(session=session, info=done)
    listing = admin_client.get(reverse("admin:forge_budget_changelist"))
    assert '<td class="field-tokens_used">123</td>' in listing.text
    usage = admin_client.get(reverse("admin:forge_usage_changelist"))
    assert usage.status_code == 200
    assert "0.500000" in usage.text
    assert admin_client.get(reverse("admin:forge_usage_add")).status_code == 403


def test_a_user_budget_needs_a_member_of_the_tenant(admin_client, tenant, other_user):
    page = admin_client.post(
        reverse("admin:forge_budget_add"),
        {"tenant": tenant.pk, "user": other_user.pk, "monthly_tokens": "5"},
    )
    assert "not a member of the tenant" in page.text
    assert not Budget.objects.exists()


def test_a_zero_limit_is_no_limit_as_set_budget_reads_it(admin_client, tenant):
    """QA: a 0 in the form was stored as a limit of 0 tokens, which refused every prompt,
    while ``set_budget`` reads 0 as "no limit" (README) and the form's own check ("set a
    monthly limit") took it for none."""
    url = reverse("admin:forge_budget_add")
    page = admin_client.post(url, {"tenant": tenant.pk, "monthly_tokens": "0", "monthly_cost": "0"})
    assert "set a monthly limit" in page.text
    assert not Budget.objects.exists()
    added = admin_client.post(
        url, {"tenant": tenant.pk, "monthly_tokens": "0", "monthly_cost": "5"}
    )
    assert added.status_code == 302
    budget = Budget.objects.get()
    assert budget.monthly_tokens is None
    assert budget.monthly_cost == 5


def test_the_budget_form_does_not_list_every_user(client, tenant, user, other_user):
    """QA: the budget's user was a plain select of every user the operator sees: with
    30,000 members, "Add budget" was 1.2 MB and took 7-11 s to render. Users are
    searched (the admin's autocomplete, scoped as the users' list is)."""
    from django.contrib.auth.models import Permission

    from accounts.models import Membership, User

    members = User.objects.bulk_create(
        [User(username=f"member-{i}", password="!") for i in range(3)]
    )
    Membership.objects.bulk_create([Membership(user=m, tenant=tenant) for m in members])
    user.is_staff = True
    user.save()
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label__in=("forge", "accounts"),
            codename__in=("add_budget", "view_budget", "view_user"),
        )
    )
    client.force_login(user)
    page = client.get(reverse("admin:forge_budget_add"))
    assert page.status_code == 200
    assert "member-1" not in page.text
    found = client.get(
        reverse("admin:autocomplete"),
        {"app_label": "forge", "model_name": "budget", "field_name": "user", "term": "member"},
    )
    assert found.status_code == 200
    assert sorted(r["text"] for r in found.json()["results"]) == [
        "member-0",
        "member-1",
        "member-2",
    ]
    other = client.get(
        reverse("admin:autocomplete"),
        {"app_label": "forge", "model_name": "budget", "field_name": "user", "term": "bob"},
    )
    assert other.json()["results"] == []  # another tenant's user: not offered
    added = client.post(
        reverse("admin:forge_budget_add"),
        {"tenant": tenant.pk, "user": members[1].pk, "monthly_tokens": "5"},
    )
    assert added.status_code == 302
    assert Budget.objects.get().user == members[1]
    refused = client.post(
        reverse("admin:forge_budget_add"),
        {"tenant": tenant.pk, "user": other_user.pk, "monthly_tokens": "5"},
    )
    assert "user" in refused.context["adminform"].form.errors


def test_a_mistyped_limit_is_not_also_called_missing(admin_client, tenant):
    """QA: a limit the form refused ("-1", "many") was reported twice, the second time
    as "set a monthly limit in tokens, in cost, or both", as if none had been typed."""
    url = reverse("admin:forge_budget_add")
    for bad in ({"monthly_tokens": "-1"}, {"monthly_cost": "many"}, {"monthly_tokens": "\u0663"}):
        page = admin_client.post(url, {"tenant": tenant.pk, **bad})
        form = page.context["adminform"].form
        assert list(form.errors) == list(bad), form.errors
        assert "set a monthly limit" not in page.text
    assert not Budget.objects.exists()


def test_the_budget_list_writes_the_cost_limit_as_its_use(admin_client, tenant):
    """QA: the list showed a limit of 100 as "100.0000000000" (the column's ten places)
    beside its use written plainly ("0.0000091")."""
    Budget.objects.create(tenant=tenant, monthly_cost="100")
    listing = admin_client.get(reverse("admin:forge_budget_changelist"))
    assert '<td class="field-cost_limit">100</td>' in listing.text
    assert "100.0000000000" not in listing.text
