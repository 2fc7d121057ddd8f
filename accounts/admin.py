from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import Membership, Tenant, User


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


class UserMembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    fk_name = "user"
    autocomplete_fields = ("tenant",)


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    inlines = (UserMembershipInline,)
    list_filter = (*BaseUserAdmin.list_filter, "memberships__tenant")


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at", "member_count")
    search_fields = ("name",)
    inlines = (MembershipInline,)

    @admin.display(description="members")
    def member_count(self, obj: Tenant) -> int:
        return obj.memberships.count()


class TenantScopedAdmin:
    """For the admin of any tenant-owned model (one with a ``tenant`` foreign key): staff
    see, search, filter and act on only the rows of tenants they are members of;
    superusers see all. Object pages of other tenants' rows are 404s, as for any
    row outside ``get_queryset``."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        user = request.user
        if user.is_superuser:
            return queryset
        return queryset.filter(tenant__memberships__user_id=user.pk)


class ReadOnlyAdmin:
    """For what operators may look at but never change (logs, projections, memory):
    no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
