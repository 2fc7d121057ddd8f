from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin

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
