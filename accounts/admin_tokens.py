"""Forge's admin of API tokens, in place of DRF's (``rest_framework.authtoken.admin``).

DRF's admin lists every token's key in plain text to anyone with the view
permission, in every tenant. Here:

* Staff see the tokens of the users they see (their own tenants' users);
  superusers all. Staff delete and issue tokens only for users they manage
  (``accounts.selectors.users_managed_by``): a token is its user's whole power.
* A key is never shown after creation: lists, pages, titles, messages and
  history show its prefix (``accounts.tokens``). URLs carry the user's id, as
  DRF's ``TokenProxy`` arranges, never the key.
* Search is by username. A key is no search oracle: staff cannot search by key
  at all, and a superuser finds a token only by its whole key (whose leaked key is
  this?), never by a piece, so no one learns a key a character at a time.
* A token cannot be changed (re-pointing a key to another user would hand one
  user's access to another): revoke it (delete) and issue a new one.
* Issuing a token in the admin shows its key once, on the page that answers the
  form, with ``Cache-Control: no-store``; nothing stores it for later (no
  message in the session or a cookie, no redirect that would reload it). Issuing
  here rather than only through ``create_user --token`` lets an operator replace a
  revoked token of an existing user; that command makes new users only.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from rest_framework.authtoken.admin import TokenAdmin as DRFTokenAdmin
from rest_framework.authtoken.models import TokenProxy

from . import tokens
from .admin_scope import BoundedSearchAdmin, managed_users, may_manage, sees_all, visible_users


class TokenAdmin(BoundedSearchAdmin, DRFTokenAdmin):
    list_display = ("shown_key", "user", "created")
    list_select_related = ("user",)
    list_filter = ("created",)
    search_fields = ("user__username",)
    search_help_text = "Username (superusers: or a whole key)"
    ordering = ("user__username",)
    actions = None  # DRF's ids are users' ids; bulk actions would not map them

    @admin.display(description="key")
    def shown_key(self, obj: TokenProxy) -> str:
        return tokens.prefix(obj.key)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TokenProxy]:
        queryset = super().get_queryset(request)
        if sees_all(request):
            return queryset
        return queryset.filter(user__in=visible_users(request))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[TokenProxy], search_term: str
    ) -> tuple[QuerySet[TokenProxy], bool]:
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if term and sees_all(request):
            found = found | queryset.filter(key=term)
        return found, may_have_duplicates

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ("user",) if obj is None else ("user", "shown_key", "created")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else ("user", "shown_key", "created")

    def formfield_for_foreignkey(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.ModelChoiceField | None:
        if db_field.name == "user":
            kwargs["queryset"] = managed_users(request).order_by("username")
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or may_manage(request, obj.user))

    def response_add(
        self, request: HttpRequest, obj: TokenProxy, post_url_continue: str | None = None
    ) -> HttpResponse:
        """The one time the key is shown: this page, answering the form's POST."""
        context = {
            **self.admin_site.each_context(request),
            "title": f"API token for {obj.user}",
            "opts": self.opts,
            "token": obj,
            "key": obj.key,
            "shown": tokens.prefix(obj.key),
            "changelist_url": reverse("admin:authtoken_tokenproxy_changelist"),
        }
        response = TemplateResponse(request, "admin/authtoken/tokenproxy/created.html", context)
        add_never_cache_headers(response)
        return response


if admin.site.is_registered(TokenProxy):
    admin.site.unregister(TokenProxy)
admin.site.register(TokenProxy, TokenAdmin)
