"""The admin of users, tenants and memberships, and the mixins every tenant-owned
model's admin uses. API tokens: ``accounts.admin_tokens``.

Who sees what. A superuser sees and may do everything. A staff user sees, within
their model permissions, only what belongs to their own tenants (the tenants they
are a member of): the users with a membership in one of them, those tenants, and
the memberships in them. Autocomplete fields offer the same, because Django's
autocomplete view asks the related model's admin for its queryset.

Who may change whom. Model permissions say what a staff user may do to users at
all; ``accounts.selectors.users_managed_by`` says to whom: only to users no more
powerful than themselves (no superuser, no one with a tenant or a permission the
editor lacks). Otherwise changing a password or minting a token would carry the
editor into another tenant or past their own rights. For the same reason a staff
user never sets ``is_superuser``, grants only permissions they hold (and groups
made only of those), makes memberships only in their own tenants, and changes no
group (groups are shared by every tenant) and no tenant's existence (creating
or deleting a tenant is a superuser's job: a tenant is the boundary itself).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import ReadOnlyPasswordHashField, ReadOnlyPasswordHashWidget
from django.contrib.auth.forms import UserChangeForm as BaseUserChangeForm
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.models import Group, Permission
from django.db.models import QuerySet
from django.http import HttpRequest

from . import admin_tokens, selectors, services
from .admin_scope import (
    BoundedSearchAdmin,
    ReadOnlyAdmin,
    RelatedOnlyFilter,
    TenantScopedAdmin,
    may_manage,
    sees_all,
    tenant_ids,
    visible_tenants,
    visible_users,
)
from .models import Membership, Tenant, User

__all__ = [
    "BoundedSearchAdmin",
    "ReadOnlyAdmin",
    "RelatedOnlyFilter",
    "TenantScopedAdmin",
    "admin_tokens",
]


class TenantFilter(admin.SimpleListFilter):
    """Users by tenant, offering only the tenants the staff user sees."""

    title = "tenant"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(t.pk), t.name) for t in visible_tenants(request)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        tenant = visible_tenants(request).filter(pk=value).first() if value.isdigit() else None
        if tenant is None:
            return queryset.none()
        return queryset.filter(pk__in=Membership.objects.filter(tenant=tenant).values("user_id"))


# --- memberships -------------------------------------------------------------------------


class MembershipInline(admin.TabularInline):
    """A tenant's members: staff add only users they can see (their tenants' users)."""

    model = Membership
    extra = 0
    autocomplete_fields = ("user",)

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField | None:
        if db_field.name == "user":
            kwargs["queryset"] = visible_users(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class UserMembershipInline(admin.TabularInline):
    """A user's tenants, as far as the staff user's own tenants go: a membership in
    another tenant is neither shown nor made."""

    model = Membership
    extra = 0
    fk_name = "user"
    autocomplete_fields = ("tenant",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Membership]:
        queryset = super().get_queryset(request)
        if sees_all(request):
            return queryset
        return queryset.filter(tenant_id__in=tenant_ids(request))

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField | None:
        if db_field.name == "tenant":
            kwargs["queryset"] = visible_tenants(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


# --- users -------------------------------------------------------------------------------


class PasswordStatusWidget(ReadOnlyPasswordHashWidget):
    """Whether the user has a password, and the button to change it; never the hasher's
    summary (algorithm, and the first characters of salt and hash), which Django
    shows even to a view-only user and no operator needs."""

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        usable = bool(value) and not str(value).startswith(UNUSABLE_PASSWORD_PREFIX)
        context["summary"] = [{"label": "Password set." if usable else "No password set."}]
        return context


class UserChangeForm(BaseUserChangeForm):
    password = ReadOnlyPasswordHashField(
        label="Password",
        widget=PasswordStatusWidget,
        help_text="Raw passwords are not stored, and the admin shows nothing of the hash.",
    )


@admin.register(User)
class UserAdmin(BoundedSearchAdmin, BaseUserAdmin):
    form = UserChangeForm
    inlines = (UserMembershipInline,)
    list_filter = (*BaseUserAdmin.list_filter, TenantFilter)

    def get_queryset(self, request: HttpRequest) -> QuerySet[User]:
        queryset = super().get_queryset(request)
        if sees_all(request):
            return queryset
        return queryset.filter(pk__in=visible_users(request).values("pk"))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if not sees_all(request):
            fields += ("is_superuser",)
        return fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Staff add users into their own tenant; with no tenant they have none to add to.
        allowed = super().has_add_permission(request)
        return allowed and (sees_all(request) or bool(tenant_ids(request)))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)
        return allowed and (obj is None or may_manage(request, obj))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or may_manage(request, obj))

    def formfield_for_manytomany(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelMultipleChoiceField | None:
        if not sees_all(request):
            assert isinstance(request.user, User)
            held = selectors.permission_ids_of(request.user)
            if db_field.name == "user_permissions":
                kwargs["queryset"] = Permission.objects.filter(pk__in=held).select_related(
                    "content_type"
                )
            elif db_field.name == "groups":
                not_held = Permission.objects.exclude(pk__in=held)
                kwargs["queryset"] = Group.objects.exclude(permissions__in=not_held)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """A user a staff user adds without a membership joins the staff user's own tenant
        (their oldest membership), so the new user is theirs to see and manage."""
        super().save_related(request, form, formsets, change)
        user = form.instance
        if not change and not sees_all(request) and not user.memberships.exists():
            services.join_tenant(user=user, tenant=selectors.tenant_for_user(request.user))


# --- tenants and groups ------------------------------------------------------------------


@admin.register(Tenant)
class TenantAdmin(BoundedSearchAdmin, admin.ModelAdmin):
    list_display = ("name", "created_at", "member_count")
    search_fields = ("name",)
    inlines = (MembershipInline,)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        queryset = super().get_queryset(request)
        if sees_all(request):
            return queryset
        return queryset.filter(pk__in=tenant_ids(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return sees_all(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_all(request)

    @admin.display(description="members")
    def member_count(self, obj: Tenant) -> int:
        return obj.memberships.count()


class GroupAdmin(BoundedSearchAdmin, BaseGroupAdmin):
    """Groups are shared by every tenant: changing one changes the rights of other
    tenants' staff. Staff may look at them; only superusers make or change them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return sees_all(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_all(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_all(request)


if admin.site.is_registered(Group):
    admin.site.unregister(Group)
admin.site.register(Group, GroupAdmin)
