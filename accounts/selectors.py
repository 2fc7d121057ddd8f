"""Reads about users and tenants."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from .exceptions import NoTenant
from .models import Membership, Tenant

__all__ = ["NoTenant", "is_member", "tenant_for_user"]


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
