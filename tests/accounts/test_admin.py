"""The admin of users, tenants, memberships and API tokens (issue 17, HIGH 3): staff see
and manage only what belongs to their own tenants, nobody sees a token's key after its
creation or a password hash, and no staff user can give anyone more rights than they
hold themselves."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.hashers import mask_hash
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from accounts.models import Membership, Tenant, User

pytestmark = pytest.mark.django_db

ELLIPSIS = "\u2026"
MISSING = "doesn\u2019t exist"


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:{name}", args=args)


def perms(*names: str) -> list[Permission]:
    found = []
    for name in names:
        app_label, codename = name.split(".")
        found.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return found


def member(tenant: Tenant, username: str, *, staff: bool = False, rights: tuple = ()) -> User:
    user = User.objects.create_user(username=username, password=f"pw-{username}-123")
    user.is_staff = staff
    user.save()
    Membership.objects.create(tenant=tenant, user=user)
    user.user_permissions.set(perms(*rights))
    return user


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def shown(key: str) -> str:
    return key[:6] + ELLIPSIS


@pytest.fixture
def globex() -> Tenant:
    return Tenant.objects.create(name="globex")


@pytest.fixture
def alice_key(user: User) -> str:
    """alice is the one member of tenant acme (the ``user`` and ``tenant`` fixtures)."""
    return Token.objects.create(user=user).key


@pytest.fixture
def carol(globex: Tenant) -> User:
    return member(globex, "carol")


@pytest.fixture
def carol_key(carol: User) -> str:
    return Token.objects.create(user=carol).key


def user_form(user: User, **changes: Any) -> dict[str, Any]:
    """The whole change form of ``user`` as the admin posts it, with ``changes``."""
    memberships = list(Membership.objects.filter(user=user).order_by("id"))
    data: dict[str, Any] = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "is_active": "on",
        "user_permissions": [p.pk for p in user.user_permissions.all()],
        "groups": [g.pk for g in user.groups.all()],
        "last_login_0": "",
        "last_login_1": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "memberships-TOTAL_FORMS": str(len(memberships)),
        "memberships-INITIAL_FORMS": str(len(memberships)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    if user.is_staff:
        data["is_staff"] = "on"
    for n, membership in enumerate(memberships):
        data[f"memberships-{n}-id"] = membership.pk
        data[f"memberships-{n}-user"] = user.pk
        data[f"memberships-{n}-tenant"] = membership.tenant_id
        data[f"memberships-{n}-role"] = membership.role
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def add_membership(data: dict[str, Any], user: User, tenant: Tenant) -> dict[str, Any]:
    n = int(data["memberships-TOTAL_FORMS"])
    data[f"memberships-{n}-user"] = user.pk
    data[f"memberships-{n}-tenant"] = tenant.pk
    data[f"memberships-{n}-role"] = "member"
    data["memberships-TOTAL_FORMS"] = str(n + 1)
    return data


# --- tokens ------------------------------------------------------------------------------


def test_staff_list_only_their_tenants_tokens_and_only_as_prefixes(
    globex, user, alice_key, carol, carol_key
):
    boss = member(globex, "boss", staff=True, rights=("authtoken.view_tokenproxy",))
    client = client_of(boss)
    listing = client.get(url("authtoken_tokenproxy_changelist"))
    assert listing.status_code == 200
    assert alice_key not in listing.text
    assert shown(alice_key) not in listing.text
    assert "alice" not in listing.text
    assert carol_key not in listing.text
    assert shown(carol_key) in listing.text
    assert "carol" in listing.text
    foreign = client.get(url("authtoken_tokenproxy_change", user.pk), follow=True)
    assert MISSING in foreign.text
    assert alice_key not in foreign.text
    own = client.get(url("authtoken_tokenproxy_change", carol.pk))
    assert own.status_code == 200
    assert shown(carol_key) in own.text
    assert carol_key not in own.text


def test_superusers_see_every_token_as_a_prefix_and_a_key_is_no_search_oracle(
    admin_client, globex, alice_key, carol_key
):
    listing = admin_client.get(url("authtoken_tokenproxy_changelist"))
    assert shown(alice_key) in listing.text
    assert shown(carol_key) in listing.text
    assert alice_key not in listing.text
    assert carol_key not in listing.text
    by_name = admin_client.get(url("authtoken_tokenproxy_changelist"), {"q": "alice"})
    assert shown(alice_key) in by_name.text
    assert shown(carol_key) not in by_name.text
    partial = admin_client.get(url("authtoken_tokenproxy_changelist"), {"q": alice_key[:10]})
    assert shown(alice_key) not in partial.text  # no guessing a key piece by piece
    whole = admin_client.get(url("authtoken_tokenproxy_changelist"), {"q": alice_key})
    assert shown(alice_key) in whole.text  # a leaked key: whose is it?
    assert shown(carol_key) not in whole.text
    # Staff cannot search by key at all, not even for their own tenant's tokens.
    boss = member(globex, "boss", staff=True, rights=("authtoken.view_tokenproxy",))
    staff = client_of(boss).get(url("authtoken_tokenproxy_changelist"), {"q": carol_key})
    assert staff.status_code == 200
    assert shown(carol_key) not in staff.text


def test_a_token_made_in_the_admin_shows_its_key_once_and_never_again(admin_client, globex):
    dave = member(globex, "dave")
    created = admin_client.post(url("authtoken_tokenproxy_add"), {"user": dave.pk})
    assert created.status_code == 200  # a page, not a redirect: nothing stores the key
    key = Token.objects.get(user=dave).key
    assert key in created.text
    assert "will not be shown again" in created.text
    for page in (
        url("authtoken_tokenproxy_changelist"),
        url("authtoken_tokenproxy_change", dave.pk),
        url("authtoken_tokenproxy_history", dave.pk),
        url("authtoken_tokenproxy_delete", dave.pk),
        url("accounts_user_change", dave.pk),
        url("accounts_user_delete", dave.pk),
        url("index"),
    ):
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert key not in response.text, page
    assert not LogEntry.objects.filter(object_repr__contains=key[6:]).exists()
    deleted = admin_client.post(
        url("authtoken_tokenproxy_delete", dave.pk), {"post": "yes"}, follow=True
    )
    assert deleted.status_code == 200
    assert shown(key) in deleted.text  # "The token “3f9a2c…” was deleted successfully."
    assert key not in deleted.text
    assert not Token.objects.filter(user=dave).exists()
    assert not LogEntry.objects.filter(object_repr__contains=key[6:]).exists()


def test_staff_make_and_revoke_tokens_only_for_users_they_manage(
    tenant, globex, user, alice_key, carol, carol_key
):
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=(
            "authtoken.view_tokenproxy",
            "authtoken.add_tokenproxy",
            "authtoken.delete_tokenproxy",
        ),
    )
    client = client_of(boss)
    erin = member(tenant, "erin")  # acme only
    refused = client.post(url("authtoken_tokenproxy_add"), {"user": erin.pk})
    assert refused.status_code == 200
    assert "Select a valid choice" in refused.text
    assert not Token.objects.filter(user=erin).exists()
    dave = member(globex, "dave")
    made = client.post(url("authtoken_tokenproxy_add"), {"user": dave.pk})
    assert made.status_code == 200
    assert Token.objects.get(user=dave).key in made.text
    client.post(url("authtoken_tokenproxy_delete", user.pk), {"post": "yes"})
    assert Token.objects.filter(key=alice_key).exists()
    revoked = client.post(url("authtoken_tokenproxy_delete", carol.pk), {"post": "yes"})
    assert revoked.status_code == 302
    assert not Token.objects.filter(key=carol_key).exists()


def test_old_log_entries_of_tokens_lose_their_keys(admin_user, alice_key, user):
    """DRF's admin logged a token's key as the entry's text; the migration masks them."""
    from django.apps import apps
    from django.contrib.contenttypes.models import ContentType
    from rest_framework.authtoken.models import TokenProxy

    entry = LogEntry.objects.create(
        user=admin_user,
        content_type=ContentType.objects.get_for_model(TokenProxy, for_concrete_model=False),
        object_id=str(user.pk),
        object_repr=alice_key,
        action_flag=1,
    )
    migration = importlib.import_module("accounts.migrations.0003_mask_token_log_entries")
    migration.mask_keys(apps, None)
    entry.refresh_from_db()
    assert entry.object_repr == shown(alice_key)


# --- users, tenants, memberships ---------------------------------------------------------


def test_staff_see_only_their_tenants_users_tenants_and_memberships(tenant, globex, user, carol):
    shared = member(tenant, "shared")
    Membership.objects.create(tenant=globex, user=shared)
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=("accounts.view_user", "accounts.view_tenant", "accounts.view_membership"),
    )
    client = client_of(boss)
    users = client.get(url("accounts_user_changelist"))
    assert users.status_code == 200
    assert "carol" in users.text
    assert "shared" in users.text
    assert "alice" not in users.text
    assert "acme" not in users.text  # not even in the tenant filter
    tenants = client.get(url("accounts_tenant_changelist"))
    assert tenants.status_code == 200
    assert "globex" in tenants.text
    assert "acme" not in tenants.text
    assert MISSING in client.get(url("accounts_user_change", user.pk), follow=True).text
    assert MISSING in client.get(url("accounts_tenant_change", tenant.pk), follow=True).text
    shared_page = client.get(url("accounts_user_change", shared.pk))
    assert shared_page.status_code == 200
    assert "globex" in shared_page.text
    assert "acme" not in shared_page.text  # their other tenant's membership is not ours
    own_tenant = client.get(url("accounts_tenant_change", globex.pk))
    assert "carol" in own_tenant.text
    by_tenant = client.get(url("accounts_user_changelist"), {"tenant": globex.pk})
    assert "carol" in by_tenant.text
    other = client.get(url("accounts_user_changelist"), {"tenant": tenant.pk})
    assert "shared" not in other.text  # no asking who else is in acme
    # A superuser sees everything.
    boss.is_superuser = True
    boss.save()
    everything = client.get(url("accounts_user_changelist"))
    assert "alice" in everything.text
    assert "acme" in client.get(url("accounts_tenant_changelist")).text


def test_no_password_hash_is_shown_to_anyone(admin_client, globex, user, carol):
    viewer = client_of(member(globex, "boss", staff=True, rights=("accounts.view_user",)))
    for client, who in ((viewer, carol), (admin_client, user)):
        page = client.get(url("accounts_user_change", who.pk))
        assert page.status_code == 200
        who.refresh_from_db()
        _algorithm, salt, digest = who.password.split("$")
        assert digest not in page.text
        assert mask_hash(digest) not in page.text
        assert mask_hash(salt) not in page.text
        assert "Password set" in page.text


def test_staff_cannot_make_anyone_superuser_or_grant_rights_they_do_not_hold(globex, carol):
    rights = ("accounts.view_user", "accounts.change_user")
    boss = member(globex, "boss", staff=True, rights=rights)
    strong = Group.objects.create(name="operators")
    strong.permissions.set(perms("forge_sessions.delete_session"))
    client = client_of(boss)
    for target in (boss, carol):
        client.post(url("accounts_user_change", target.pk), user_form(target, is_superuser="on"))
        client.post(
            url("accounts_user_change", target.pk),
            user_form(target, user_permissions=[p.pk for p in perms("auth.change_group")]),
        )
        client.post(url("accounts_user_change", target.pk), user_form(target, groups=[strong.pk]))
        target.refresh_from_db()
        assert not target.is_superuser
        assert not target.user_permissions.filter(codename="change_group").exists()
        assert not target.groups.exists()
    # What they hold, they may give, so the form itself is sound.
    granted = client.post(
        url("accounts_user_change", carol.pk),
        user_form(carol, first_name="Carol", user_permissions=[perms("accounts.view_user")[0].pk]),
    )
    assert granted.status_code == 302
    carol.refresh_from_db()
    assert carol.first_name == "Carol"
    assert carol.has_perm("accounts.view_user")


def test_staff_cannot_take_over_superusers_other_tenants_users_or_stronger_staff(
    tenant, globex, carol
):
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=("accounts.view_user", "accounts.change_user", "accounts.delete_user"),
    )
    root = member(globex, "root", staff=True)
    root.is_superuser = True
    root.save()
    shared = member(tenant, "shared")  # also a member of acme, which boss is not
    Membership.objects.create(tenant=globex, user=shared)
    stronger = member(globex, "stronger", staff=True, rights=("forge_sessions.delete_session",))
    client = client_of(boss)
    new_password = {"password1": "pw-taken-over-1", "password2": "pw-taken-over-1"}
    for target in (root, shared, stronger):
        change_password = url("auth_user_password_change", target.pk)
        assert client.get(change_password).status_code == 403, target
        assert client.post(change_password, new_password).status_code == 403, target
        renamed = user_form(target, first_name="Mallory")
        assert client.post(url("accounts_user_change", target.pk), renamed).status_code == 403
        target.refresh_from_db()
        assert target.check_password(f"pw-{target.username}-123")
        assert target.first_name == ""
    assert client.get(url("auth_user_password_change", carol.pk)).status_code == 200
    done = client.post(url("auth_user_password_change", carol.pk), new_password)
    assert done.status_code == 302
    carol.refresh_from_db()
    assert carol.check_password("pw-taken-over-1")
    # Nor delete them, one by one or in bulk; carol, yes.
    targets = [root.pk, shared.pk, stronger.pk]
    for pk in targets:
        assert client.post(url("accounts_user_delete", pk), {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": targets, "post": "yes"}
    client.post(url("accounts_user_changelist"), bulk)
    assert User.objects.filter(pk__in=targets).count() == 3
    client.post(url("accounts_user_changelist"), {**bulk, "_selected_action": [carol.pk]})
    assert not User.objects.filter(pk=carol.pk).exists()


def test_memberships_are_made_only_within_the_staff_users_tenants(tenant, globex, user, carol):
    initech = Tenant.objects.create(name="initech")
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=(
            "accounts.view_user",
            "accounts.change_user",
            "accounts.view_tenant",
            "accounts.change_tenant",
            "accounts.view_membership",
            "accounts.add_membership",
            "accounts.change_membership",
        ),
    )
    Membership.objects.create(tenant=initech, user=boss)
    ivan = member(initech, "ivan")
    client = client_of(boss)
    # On a user's page: a tenant of boss's, yes; anyone else's, no.
    client.post(
        url("accounts_user_change", carol.pk),
        add_membership(user_form(carol), carol, tenant),
    )
    assert not Membership.objects.filter(user=carol, tenant=tenant).exists()
    client.post(url("accounts_user_change", boss.pk), add_membership(user_form(boss), boss, tenant))
    assert not Membership.objects.filter(user=boss, tenant=tenant).exists()
    joined = client.post(
        url("accounts_user_change", carol.pk),
        add_membership(user_form(carol), carol, initech),
    )
    assert joined.status_code == 302
    assert Membership.objects.filter(user=carol, tenant=initech).exists()
    # On a tenant's page: a user boss can see, yes; another tenant's user, no.
    tenant_form = {
        "name": "globex",
        "memberships-TOTAL_FORMS": "1",
        "memberships-INITIAL_FORMS": "0",
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
        "memberships-0-tenant": globex.pk,
        "memberships-0-role": "member",
    }
    client.post(
        url("accounts_tenant_change", globex.pk), {**tenant_form, "memberships-0-user": user.pk}
    )
    assert not Membership.objects.filter(user=user, tenant=globex).exists()
    added = client.post(
        url("accounts_tenant_change", globex.pk), {**tenant_form, "memberships-0-user": ivan.pk}
    )
    assert added.status_code == 302
    assert Membership.objects.filter(user=ivan, tenant=globex).exists()


def test_autocomplete_offers_only_the_staff_users_own_users_and_tenants(
    tenant, globex, user, carol
):
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=(
            "accounts.view_user",
            "accounts.change_user",
            "accounts.view_tenant",
            "accounts.change_tenant",
        ),
    )
    client = client_of(boss)
    source = {"app_label": "accounts", "model_name": "membership"}
    found = {}
    for field in ("user", "tenant"):
        response = client.get(reverse("admin:autocomplete"), {**source, "field_name": field})
        assert response.status_code == 200
        found[field] = {item["text"] for item in response.json()["results"]}
    assert found["user"] == {"carol", "boss"}
    assert found["tenant"] == {"globex"}
    for field, term in (("user", "ali"), ("tenant", "acm")):
        response = client.get(
            reverse("admin:autocomplete"), {**source, "field_name": field, "term": term}
        )
        assert response.json()["results"] == []


def test_a_user_added_by_staff_joins_their_tenant(globex):
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=("accounts.view_user", "accounts.add_user", "accounts.change_user"),
    )
    client = client_of(boss)
    response = client.post(
        url("accounts_user_add"),
        {
            "username": "newbie",
            "usable_password": "true",
            "password1": "pw-newbie-long-1",
            "password2": "pw-newbie-long-1",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
        },
    )
    assert response.status_code == 302
    newbie = User.objects.get(username="newbie")
    assert list(Membership.objects.filter(user=newbie).values_list("tenant__name", flat=True)) == [
        "globex"
    ]
    assert client.get(url("accounts_user_change", newbie.pk)).status_code == 200


def test_only_superusers_change_groups_or_tenants_themselves(globex):
    """Groups are shared by every tenant, and a tenant is the boundary itself."""
    group = Group.objects.create(name="readers")
    boss = member(
        globex,
        "boss",
        staff=True,
        rights=(
            "auth.view_group",
            "auth.change_group",
            "auth.add_group",
            "accounts.view_tenant",
            "accounts.add_tenant",
            "accounts.delete_tenant",
        ),
    )
    client = client_of(boss)
    change = client.post(
        url("auth_group_change", group.pk),
        {"name": "readers", "permissions": [p.pk for p in perms("auth.change_group")]},
    )
    assert change.status_code == 403
    assert not group.permissions.exists()
    assert client.get(url("auth_group_change", group.pk)).status_code == 200  # may still look
    assert client.post(url("auth_group_add"), {"name": "x"}).status_code == 403
    assert client.post(url("accounts_tenant_add"), {"name": "newco"}).status_code == 403
    assert not Tenant.objects.filter(name="newco").exists()
    assert client.post(url("accounts_tenant_delete", globex.pk), {"post": "yes"}).status_code == 403
    assert Tenant.objects.filter(pk=globex.pk).exists()


def test_every_admin_page_serves_a_staff_user_with_every_permission(tenant, globex, alice_key):
    """No page of the admin fails for, or shows another tenant's secrets to, a staff user
    who holds every permission but is no superuser."""
    from django.contrib import admin

    boss = member(globex, "boss", staff=True)
    boss.user_permissions.set(Permission.objects.all())
    client = client_of(boss)
    assert client.get(url("index")).status_code == 200
    for model in admin.site._registry:
        opts = model._meta
        for view in ("changelist", "add"):
            response = client.get(url(f"{opts.app_label}_{opts.model_name}_{view}"))
            assert response.status_code in (200, 403), (opts.label, view)
            assert alice_key not in response.text
            assert "acme" not in response.text, (opts.label, view)
