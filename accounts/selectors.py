"""Reads about users and tenants."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, Permission
from django.db.models import QuerySet

from .exceptions import NoTenant
from .models import Membership, Tenant, User

__all__ = [
    "NoTenant",
    "is_member",
    "member",
    "members_of",
    "permission_ids_of",
    "tenant_for_user",
    "tenant_ids_of",
    "users_managed_by",
]


def tenant_for_user(user: AbstractBaseUser | AnonymousUser) -> Tenant:
    """The user's own tenant: their oldest membership."""
    if not user.is_authenticated:
        raise NoTenant("anonymous users have no tenant")
    membership = (
        Membership.objects.select_related("tenant")
        .filter(user_id=user.pk)
        .order_by("created_at", "id")
        .first()
    )
    if membership is None:
        raise NoTenant(f"user {user.get_username()!r} belongs to no tenant")
    return membership.tenant


def is_member(*, user: AbstractBaseUser, tenant: Tenant) -> bool:
    return Membership.objects.filter(user_id=user.pk, tenant=tenant).exists()


def tenant_ids_of(user: AbstractBaseUser | AnonymousUser) -> list[int]:
    """The ids of every tenant ``user`` is a member of (none for an anonymous user)."""
    if not user.is_authenticated:
        return []
    return list(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", flat=True))


def members_of(tenant_ids: Iterable[int]) -> QuerySet[User]:
    """Every user with a membership in at least one of these tenants, each once."""
    return User.objects.filter(
        pk__in=Membership.objects.filter(tenant_id__in=list(tenant_ids)).values("user_id")
    )


def permission_ids_of(user: User) -> set[int]:
    """The ids of the permissions ``user`` holds, directly or through a group, whether or
    not the account is active or a superuser (Django's ``get_all_permissions`` answers
    nothing for an inactive user, which must not make a strong account look weak)."""
    direct = Permission.objects.filter(user=user)
    grouped = Permission.objects.filter(group__user=user)
    return set(direct.values_list("pk", flat=True)) | set(grouped.values_list("pk", flat=True))


def users_managed_by(editor: User) -> QuerySet[User]:
    """The users a non-superuser ``editor`` may change, delete, or issue tokens for: those
    who are no more powerful than the editor, so that taking one over (setting their
    password, minting their token) gains the editor nothing. That is, users

    * who are not superusers,
    * whose every tenant is one of the editor's (a user shared with a tenant the
      editor is not in would carry the editor into it),
    * whose every permission, direct or through a group, the editor holds too.

    The editor is among them. Superusers manage everyone; this is not asked for them.
    """
    tenants = tenant_ids_of(editor)
    held = permission_ids_of(editor)
    not_held = Permission.objects.exclude(pk__in=held)
    elsewhere = Membership.objects.exclude(tenant_id__in=tenants).values("user_id")
    # The m2m tables' models (typed loosely: the stubs' view of ``through`` depends on
    # which other models mypy has seen).
    direct: Any = User.user_permissions.through
    grouped: Any = User.groups.through
    stronger_direct = direct.objects.filter(permission__in=not_held).values("user_id")
    stronger_grouped = grouped.objects.filter(group__permissions__in=not_held).values("user_id")
    return (
        members_of(tenants)
        .filter(is_superuser=False)
        .exclude(pk__in=elsewhere)
        .exclude(pk__in=stronger_direct)
        .exclude(pk__in=stronger_grouped)
    )


def member(*, tenant: Tenant, user_id: Any) -> AbstractBaseUser | None:
    """The user ``user_id`` if they are a member of ``tenant`` (one query), else None: for
    an id read from a log (a turn's speaker), which may name a user since deleted, one
    who left the tenant, or, in an imported log, nobody of this database."""
    if isinstance(user_id, bool) or not isinstance(user_id, int):
        return None
    found: AbstractBaseUser | None = (
        get_user_model().objects.filter(pk=user_id, memberships__tenant=tenant).first()
    )
    return found
