"""Users, tenants and who belongs where.

Every row on the session side carries a tenant. A user acts within the tenant
of their membership (their *own* tenant); the model allows several
memberships so a person can later be invited elsewhere, and the oldest one is
the default.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models


class User(AbstractUser):
    """Forge's user. Custom from day one so it can grow without a data migration."""

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"


class Tenant(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="tenants"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        ADMIN = "admin", "Admin"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique_tenant_user")
        ]
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant}"
