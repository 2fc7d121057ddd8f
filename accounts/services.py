"""Writes about users and tenants."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from .models import Membership, Tenant, User


@dataclass(frozen=True)
class CreatedUser:
    user: User
    tenant: Tenant
    tenant_created: bool
    token: str | None


@transaction.atomic
def create_user(
    *,
    username: str,
    tenant_name: str,
    password: str | None = None,
    staff: bool = False,
    with_token: bool = False,
    validate: bool = True,
) -> CreatedUser:
    """Create the tenant if needed, then a user who is a member of it.

    Raises ``ValidationError`` (nothing written) for an empty or taken username (in
    any case),
    an empty tenant name, or a password the validators refuse.
    """
    username = username.strip()
    tenant_name = tenant_name.strip()
    if not username:
        raise ValidationError("username must not be empty")
    if not tenant_name:
        raise ValidationError("tenant name must not be empty")
    if any(unicodedata.category(c) == "Cc" for c in username + tenant_name):
        raise ValidationError("names must not hold control characters")
    if len(tenant_name) > Tenant._meta.get_field("name").max_length:  # type: ignore[operator]
        raise ValidationError("tenant name is longer than 100 characters")
    limit = User._meta.get_field("username").max_length
    if limit is not None and len(username) > limit:  # the admin's form says the same
        raise ValidationError(f"username is longer than {limit} characters")
    User.username_validator(username)
    # Case-insensitive, as the admin's user form (Django's UserCreationForm) checks:
    # "Alice" beside "alice" is one person to the people who read the names.
    taken = User.objects.filter(username__iexact=username).values_list("username", flat=True)
    if existing := taken.first():
        raise ValidationError(f"a user named {existing!r} already exists")
    user = User(username=username, is_staff=staff)
    if password:
        if validate:
            validate_password(password, user)
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    tenant, tenant_created = Tenant.objects.get_or_create(name=tenant_name)
    Membership.objects.create(
        tenant=tenant,
        user=user,
        role=Membership.Role.ADMIN if tenant_created else Membership.Role.MEMBER,
    )
    token = Token.objects.create(user=user).key if with_token else None
    return CreatedUser(user=user, tenant=tenant, tenant_created=tenant_created, token=token)


def join_tenant(*, user: User, tenant: Tenant) -> Membership:
    """Make ``user`` a member of ``tenant`` (idempotent: an existing membership is kept)."""
    membership, _ = Membership.objects.get_or_create(user=user, tenant=tenant)
    return membership
