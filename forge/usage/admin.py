"""The operators' view of usage (read-only: a fold of the logs) and of budgets
(editable, with the month's use against each limit). Tenant-scoped: staff see and set
only their own tenants' rows."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.http import HttpRequest
from django.utils.text import smart_split, unescape_string_literal

from accounts.admin import ReadOnlyAdmin, RelatedOnlyFilter, TenantScopedAdmin
from accounts.admin_scope import SEARCH_WORDS_MAX, sees_all, tenant_ids
from accounts.models import Tenant, User
from forge.models import Budget, Usage

from . import selectors
from .budgets import plain, unpriced_warning
from .services import InvalidBudget, clean_limit


@admin.register(Usage)
class UsageAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = (
        "day",
        "tenant",
        "user_shown",
        "agent",
        "model",
        "turns",
        "steps",
        "input_tokens",
        "output_tokens",
        "cost_shown",
        "failed",
        "aborted",
        "tool_calls",
    )
    list_filter = ("day", "agent", "model", ("tenant", RelatedOnlyFilter))
    # The user by the name each row shows (``get_search_results``): ``user__username``
    # joined the users' table, and a search by agent dropped a deleted user's rows (QA).
    search_fields = ("agent", "model")
    # Not the user: a row keeps a deleted user's id (no foreign key constraint), and the
    # join dropped such rows from the list (QA). Their names come with the page's rows.
    list_select_related = ("tenant",)
    date_hierarchy = "day"
    ordering = ("-day", "tenant", "user_id")

    def get_queryset(self, request: HttpRequest) -> Any:
        names = User.objects.filter(pk=OuterRef("user_id")).values("username")[:1]
        return super().get_queryset(request).annotate(username=Subquery(names))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Usage], search_term: str
    ) -> tuple[QuerySet[Usage], bool]:
        """Each word (the first :data:`SEARCH_WORDS_MAX`, as every list reads) in the
        user's name, the agent or the model, the name read as the list shows it: the
        rows of a user deleted since stay (Django's search joined the users' table)."""
        words = [
            word for _, word in zip(range(SEARCH_WORDS_MAX), smart_split(search_term), strict=False)
        ]
        for word in words:
            if len(word) > 1 and word[0] in "\"'" and word[-1] == word[0]:
                word = unescape_string_literal(word)
            queryset = queryset.filter(
                Q(username__ucontains=word) | Q(agent__ucontains=word) | Q(model__ucontains=word)
            )
        return queryset, False

    @admin.display(description="user", ordering="username")
    def user_shown(self, obj: Usage) -> str:
        return getattr(obj, "username", None) or f"user {obj.user_id}"

    @admin.display(description="cost", ordering="cost_nanos")
    def cost_shown(self, obj: Usage) -> str:
        return f"{obj.cost:.6f}"


class BudgetForm(forms.ModelForm):
    class Meta:
        model = Budget
        fields = ["tenant", "user", "monthly_tokens", "monthly_cost"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        tenant, user = data.get("tenant"), data.get("user")
        if (
            tenant is not None
            and user is not None
            and not user.memberships.filter(tenant=tenant).exists()
        ):
            self.add_error("user", "this user is not a member of the tenant")
        # 0 is no limit, as ``set_budget`` reads it (README): stored as a 0, it refused
        # every prompt ("the budget of 0 tokens is used up") while this form, checking
        # that some limit is set, took it for none (QA).
        for name in ("monthly_tokens", "monthly_cost"):
            raw = self.data.get(self.add_prefix(name))
            if isinstance(raw, str) and (not raw.isascii() or "_" in raw):
                # The field read other scripts' digits and "5_000" as numbers, which
                # ``set_budget`` refuses (QA): the typed text is checked as it refuses it.
                self.add_error(name, f"{name.replace('_', ' ')}: expected a number, got {raw!r}")
                data.pop(name, None)
                continue
            if data.get(name) == 0:
                data[name] = None
            try:
                clean_limit(
                    data.get(name),
                    name=name.replace("_", " "),
                    integer=name == "monthly_tokens",
                )
            except InvalidBudget as exc:
                self.add_error(name, str(exc))
        mistyped = self.has_error("monthly_tokens") or self.has_error("monthly_cost")
        if not mistyped and not data.get("monthly_tokens") and not data.get("monthly_cost"):
            # (Not for a limit refused above: it was typed, and also called missing; QA.)
            raise forms.ValidationError("set a monthly limit in tokens, in cost, or both")
        return data


@admin.register(Budget)
class BudgetAdmin(TenantScopedAdmin, admin.ModelAdmin):
    form = BudgetForm
    # Searched, not listed: a select of every user (30,000 members: a 1.2 MB page that
    # took 7-11 s; QA). The autocomplete reads the users' admin list (the view_user
    # permission), scoped to the operator's tenants as the choices below are.
    autocomplete_fields = ("user",)
    list_display = ("tenant", "user", "monthly_tokens", "tokens_used", "cost_limit", "cost_used")
    list_select_related = ("tenant", "user")
    list_filter = (("tenant", RelatedOnlyFilter),)
    search_fields = ("tenant__name", "user__username")

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not sees_all(request):
            if db_field.name == "tenant":
                kwargs["queryset"] = Tenant.objects.filter(pk__in=tenant_ids(request))
            elif db_field.name == "user":
                kwargs["queryset"] = User.objects.filter(
                    memberships__tenant_id__in=tenant_ids(request)
                ).distinct()
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Budget, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        warning = unpriced_warning() if obj.monthly_cost is not None else None
        if warning:
            self.message_user(request, f"Saved, but {warning}.", messages.WARNING)

    def _use(self, obj: Budget) -> tuple[int, Any]:
        """The month's use, read once per row (both columns show it)."""
        use = getattr(obj, "_month_use", None)
        if use is None:
            use = selectors.month_use(
                tenant=obj.tenant, user_id=obj.user_id, now=dt.datetime.now(dt.UTC)
            )
            obj._month_use = use  # type: ignore[attr-defined]
        return use

    @admin.display(description="tokens used this month")
    def tokens_used(self, obj: Budget) -> int:
        return self._use(obj)[0]

    @admin.display(description="monthly cost", ordering="monthly_cost")
    def cost_limit(self, obj: Budget) -> str:
        # As its use beside it (the column's ten places showed 100 as 100.0000000000).
        return "-" if obj.monthly_cost is None else plain(obj.monthly_cost)

    @admin.display(description="cost used this month")
    def cost_used(self, obj: Budget) -> str:
        return plain(self._use(obj)[1])  # 0.00039376, not 0.0004
