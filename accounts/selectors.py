"""Reads about users and tenants."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from .exceptions import NoTenant
from .models import Membership, Tenant

__all__ = ["NoTenant", "is_member", "member", "tenant_for_user"]


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
