"""Reads about users and tenants."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from .models import Membership, Tenant


class NoTenant(LookupError):
    """The user belongs to no tenant, so has nothing to act on."""


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
