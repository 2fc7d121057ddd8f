"""What the admin shows a staff user, and to whom they may do what (see ``accounts.admin``).

Shared by every admin of Forge: the stores' admins scope tenant-owned rows with
``TenantScopedAdmin``; the accounts' own admins use the functions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.text import smart_split

from . import selectors
from .models import Tenant, User


def tenant_ids(request: HttpRequest) -> list[int]:
    """The tenants of the request's user (asked once per request)."""
    cached = getattr(request, "_forge_admin_tenant_ids", None)
    if cached is None:
        cached = selectors.tenant_ids_of(request.user)
        request._forge_admin_tenant_ids = cached  # type: ignore[attr-defined]
    return cached


def sees_all(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser)


def visible_users(request: HttpRequest) -> QuerySet[User]:
    if sees_all(request):
        return User.objects.all()
    return selectors.members_of(tenant_ids(request))


def visible_tenants(request: HttpRequest) -> QuerySet[Tenant]:
    if sees_all(request):
        return Tenant.objects.all()
    return Tenant.objects.filter(pk__in=tenant_ids(request))


def may_manage(request: HttpRequest, user: Model) -> bool:
    """May the request's user change or delete ``user``, or issue a token for them?"""
    if sees_all(request):
        return True
    assert isinstance(request.user, User)
    return selectors.users_managed_by(request.user).filter(pk=user.pk).exists()


def managed_users(request: HttpRequest) -> QuerySet[User]:
    if sees_all(request):
        return User.objects.all()
    assert isinstance(request.user, User)
    return selectors.users_managed_by(request.user)


SEARCH_WORDS_MAX = 32


class RelatedOnlyFilter(admin.RelatedOnlyFieldListFilter):
    """Django's ``RelatedOnlyFieldListFilter``, applied whenever its parameter is given.

    Django leaves out a filter with fewer than two choices, and its parameter with it:
    a staff user of one tenant who opened ``?tenant__id__exact=<another tenant>`` got
    every row of their own tenant, listed as if it were the other's (QA, LOW; nothing
    of the other tenant was shown). Applied, the filter lists what matches: nothing."""

    def has_output(self) -> bool:
        given = self.lookup_val is not None or self.lookup_val_isnull is not None
        return given or super().has_output()


_LOOKUPS = ("__exact", "__iexact", "__contains", "__icontains", "__ucontains", "__search")


class BoundedSearchAdmin:
    """An admin search reads the first :data:`SEARCH_WORDS_MAX` words of what was typed.

    Django's admin search ANDs one ``OR`` of every search field per word, so a pasted
    paragraph of a thousand words made an expression SQLite refuses ("Expression tree
    is too large": a 500, QA) and PostgreSQL plans for seconds; no one narrows a list
    by more than a few words."""

    def get_search_fields(self, request: HttpRequest) -> Any:
        """Each plain search field as ``ucontains`` (``accounts.lookups``: Unicode's case
        folding on SQLite too); ``=``, ``^`` and ``@`` fields and explicit lookups as
        they are."""
        return [
            field if field[:1] in "=^@" or field.endswith(_LOOKUPS) else f"{field}__ucontains"
            for field in super().get_search_fields(request)  # type: ignore[misc]
        ]

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        words = smart_split(search_term)
        bounded = " ".join(word for _, word in zip(range(SEARCH_WORDS_MAX), words, strict=False))
        return super().get_search_results(request, queryset, bounded)  # type: ignore[misc]


class TenantScopedAdmin(BoundedSearchAdmin):
    """For the admin of any tenant-owned model: staff see, search, filter and act on only
    the rows of tenants they are members of; superusers see all. Object pages of other
    tenants' rows are 404s, as for any row outside ``get_queryset``. ``tenant_path`` is
    the lookup from the model to its tenant (``tenant``, or e.g. ``session__tenant``)."""

    tenant_path = "tenant"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        if sees_all(request):
            return queryset
        return queryset.filter(**{f"{self.tenant_path}_id__in": tenant_ids(request)})


class ReadOnlyAdmin:
    """For what operators may look at but never change (logs, projections, memory):
    no add, change or delete, whatever the user's permissions."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
