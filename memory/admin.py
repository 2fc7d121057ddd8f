"""Operators' view of memory: cores → units → slices, with the raw messages of each slice.

Staff see the data of the tenants they are members of; superusers see all.
Slices and messages are read-only. A core can be rolled now (the "roll now"
action, ``services.roll_core``: the same engine as ``roll_dialogs``) or deleted
as a whole (``services.delete_core``), given the change or delete permission
on memory cores.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Model, QuerySet, Sum
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from accounts.admin import ReadOnlyAdmin, RelatedOnlyFilter, TenantScopedAdmin

from . import selectors, services
from .exceptions import MemoryStoreError
from .models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit
from .rolling.options import RollingOptions
from .times import format_time

UNIT_MESSAGES_SHOWN = 500
WINDOW_SHOWN = 100


def _brief(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _link(model: type[Model], pk: Any, label: Any = None) -> SafeString:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])
    return format_html('<a href="{}">{}</a>', url, label if label is not None else pk)


def _messages_table(rows: Iterable[MemoryMessage | DialogueMessage], number: str) -> SafeString:
    body = format_html_join(
        "",
        '<tr><td>{}</td><td>{}</td><td>{}</td><td style="white-space: pre-wrap">{}</td></tr>',
        ((getattr(r, number), r.role, format_time(r.at), r.text) for r in rows),
    )
    return format_html(
        "<table><thead><tr><th>{}</th><th>role</th><th>at</th><th>text</th></tr></thead>"
        "<tbody>{}</tbody></table>",
        number,
        body,
    )


class AgentFilter(admin.SimpleListFilter):
    """The agents among the rows this user may see (never another tenant's names)."""

    title = "agent"
    parameter_name = "agent"
    path = "agent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = (
            model_admin.get_queryset(request)
            .order_by(self.path)
            .values_list(self.path, flat=True)
            .distinct()
        )
        return [(value, value) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.path: value}) if value else queryset


class UnitAgentFilter(AgentFilter):
    path = "core__agent"


class SliceAgentFilter(AgentFilter):
    path = "unit__core__agent"


# --- cores -----------------------------------------------------------------------------------


@admin.register(MemoryCore)
class MemoryCoreAdmin(TenantScopedAdmin, admin.ModelAdmin):
    list_display = (
        "id",
        "tenant",
        "user",
        "agent",
        "window_count",
        "unit_total",
        "slice_total",
        "message_total",
        "last_interaction_at",
        "rolled_at",
    )
    list_filter = (
        ("tenant", RelatedOnlyFilter),
        ("user", RelatedOnlyFilter),
        AgentFilter,
        "last_interaction_at",
        "created_at",
    )
    search_fields = ("=id", "user__username", "agent", "=memory_session_id")
    list_select_related = ("tenant", "user")
    date_hierarchy = "created_at"
    ordering = ("-last_interaction_at",)
    actions = ("roll_now",)
    fields = (
        "id",
        "tenant",
        "user",
        "agent",
        "memory_session_id",
        "created_at",
        "last_interaction_at",
        "rolled_at",
        "window_count",
        "rolled_seq",
        "window_next_seq",
        "history_digest",
        "history_digest_at",
        "units_table",
        "window_table",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryCore]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                _units=Count("units", distinct=True),
                _slices=Sum("units__slice_count"),
                _messages=Sum("units__message_count"),
            )
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # cores start from the dialogue (services.append_dialogue)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # nothing to edit; rolling is an action

    def has_roll_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("memory.change_memorycore")

    @admin.display(description="units", ordering="_units")
    def unit_total(self, obj: MemoryCore) -> int:
        return getattr(obj, "_units", 0) or 0

    @admin.display(description="slices", ordering="_slices")
    def slice_total(self, obj: MemoryCore) -> int:
        return getattr(obj, "_slices", 0) or 0

    @admin.display(description="messages in units", ordering="_messages")
    def message_total(self, obj: MemoryCore) -> int:
        return getattr(obj, "_messages", 0) or 0

    @admin.display(description="units (oldest first)")
    def units_table(self, obj: MemoryCore) -> SafeString:
        units = MemoryUnit.objects.filter(tenant_id=obj.tenant_id, core=obj).order_by("id")
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    _link(MemoryUnit, u.pk),
                    u.memory_session_id,
                    u.message_count,
                    u.slice_count,
                    format_time(u.updated_at),
                )
                for u in units
            ),
        )
        return format_html(
            "<table><thead><tr><th>unit</th><th>memory session</th><th>messages</th>"
            "<th>slices</th><th>updated</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="dialogue window (most recent)")
    def window_table(self, obj: MemoryCore) -> SafeString:
        rows = list(
            DialogueMessage.objects.filter(tenant_id=obj.tenant_id, core=obj).order_by("-seq")[
                :WINDOW_SHOWN
            ]
        )
        rows.reverse()
        return _messages_table(rows, "seq")

    @admin.action(
        description="Roll now (summarize what is not yet in a unit)", permissions=["roll"]
    )
    def roll_now(self, request: HttpRequest, queryset: QuerySet[MemoryCore]) -> None:
        rolled = 0
        for core in queryset.select_related("tenant"):
            try:
                outcome = services.roll_core(tenant=core.tenant, core=core, force=True)
            except MemoryStoreError as exc:
                # "Core …": the admin capitalizes a message's first letter (Mco_…)
                self.message_user(request, f"Core {core.pk}: {exc}", messages.ERROR)
                continue
            if outcome.status == "rolled":
                rolled += 1
            elif outcome.status == "failed" and outcome.error:
                self.message_user(
                    request,
                    f"Core {core.pk}: {outcome.error['code']}: {outcome.error['message']}",
                    messages.ERROR,
                )
            elif outcome.status == "not_due":  # forced: nothing past what rolling keeps
                self.message_user(request, _not_rolled(core), messages.INFO)
            else:
                self.message_user(
                    request, f"Core {core.pk}: {outcome.status.replace('_', ' ')}", messages.INFO
                )
        self.message_user(request, f"Rolled {rolled} core{'s' if rolled != 1 else ''}.")

    def delete_model(self, request: HttpRequest, obj: MemoryCore) -> None:
        services.delete_core(tenant=obj.tenant, core=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryCore]) -> None:
        for core in queryset.select_related("tenant"):
            services.delete_core(tenant=core.tenant, core=core)

    def get_deleted_objects(
        self, objs: Iterable[MemoryCore], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """Summarise instead of listing every message: a core can hold millions."""
        cores = list(objs)
        units = MemoryUnit.objects.filter(core__in=cores)
        counts = {
            "memory cores": len(cores),
            "memory units": units.count(),
            "memory slices": MemorySlice.objects.filter(unit__in=units).count(),
            "memory messages": MemoryMessage.objects.filter(unit__in=units).count(),
            "dialogue window messages": DialogueMessage.objects.filter(core__in=cores).count(),
        }
        summary = [f"Memory core {c.agent} / {c.user} ({c.pk}), with all it holds" for c in cores]
        return summary, counts, set(), []


# --- units -----------------------------------------------------------------------------------


class SliceInline(ReadOnlyAdmin, admin.TabularInline):
    model = MemorySlice
    fields = ("slice_link", "start_index", "end_index", "summary_brief", "created_at")
    readonly_fields = fields
    ordering = ("created_at", "id")
    extra = 0
    can_delete = False
    show_change_link = False

    @admin.display(description="slice")
    def slice_link(self, obj: MemorySlice) -> SafeString:
        return _link(MemorySlice, obj.pk)

    @admin.display(description="summary")
    def summary_brief(self, obj: MemorySlice) -> str:
        return _brief(obj.summary, 200)


@admin.register(MemoryUnit)
class MemoryUnitAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = (
        "id",
        "core_link",
        "agent",
        "user",
        "memory_session_id",
        "message_count",
        "slice_count",
        "updated_at",
    )
    list_filter = (
        ("tenant", RelatedOnlyFilter),
        ("core__user", RelatedOnlyFilter),
        UnitAgentFilter,
        "updated_at",
    )
    search_fields = ("=id", "=memory_session_id", "=core__id", "core__user__username")
    list_select_related = ("core", "core__user")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    inlines = (SliceInline,)
    fields = (
        "id",
        "tenant",
        "core_link",
        "memory_session_id",
        "created_at",
        "updated_at",
        "message_count",
        "slice_count",
        "messages_table",
    )
    readonly_fields = fields

    @admin.display(description="core")
    def core_link(self, obj: MemoryUnit) -> SafeString:
        return _link(MemoryCore, obj.core_id)

    @admin.display(description="agent", ordering="core__agent")
    def agent(self, obj: MemoryUnit) -> str:
        return obj.core.agent

    @admin.display(description="user", ordering="core__user__username")
    def user(self, obj: MemoryUnit) -> str:
        return str(obj.core.user)

    @admin.display(description="conversation messages")
    def messages_table(self, obj: MemoryUnit) -> SafeString:
        rows = MemoryMessage.objects.filter(tenant_id=obj.tenant_id, unit=obj).order_by("index")
        shown = _messages_table(rows[:UNIT_MESSAGES_SHOWN], "index")
        if obj.message_count <= UNIT_MESSAGES_SHOWN:
            return shown
        url = reverse("admin:memory_memorymessage_changelist") + f"?unit__id__exact={obj.pk}"
        return format_html(
            '{}<p>First {} of {}. <a href="{}">All messages of this unit</a></p>',
            shown,
            UNIT_MESSAGES_SHOWN,
            obj.message_count,
            url,
        )


# --- slices and messages ----------------------------------------------------------------------


@admin.register(MemorySlice)
class MemorySliceAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ("id", "unit_link", "agent", "user", "range", "summary_brief", "created_at")
    list_filter = (
        ("tenant", RelatedOnlyFilter),
        ("unit__core__user", RelatedOnlyFilter),
        SliceAgentFilter,
        "created_at",
        "indexed",
        "digested",
    )
    search_fields = ("summary", "=id", "=unit__id")
    list_select_related = ("unit", "unit__core", "unit__core__user")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    fields = (
        "id",
        "tenant",
        "unit_link",
        "range",
        "created_at",
        "indexed",
        "digested",
        "side_by_side",
    )
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """The summary's text and the ids as Django matches them, and also every slice
        whose summary or raw messages hold the words as memory search reads them
        (accents folded, Chinese and Japanese inside words): "cafe" finds "café"."""
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if search_term.strip():
            found = found | selectors.slices_holding(queryset, search_term)
        return found, duplicates

    @admin.display(description="unit")
    def unit_link(self, obj: MemorySlice) -> SafeString:
        return _link(MemoryUnit, obj.unit_id)

    @admin.display(description="agent", ordering="unit__core__agent")
    def agent(self, obj: MemorySlice) -> str:
        return obj.unit.core.agent

    @admin.display(description="user", ordering="unit__core__user__username")
    def user(self, obj: MemorySlice) -> str:
        return str(obj.unit.core.user)

    @admin.display(description="messages")
    def range(self, obj: MemorySlice) -> str:
        return f"[{obj.start_index}, {obj.end_index})"

    @admin.display(description="summary")
    def summary_brief(self, obj: MemorySlice) -> str:
        return _brief(obj.summary)

    @admin.display(description="summary and the messages it covers")
    def side_by_side(self, obj: MemorySlice) -> SafeString:
        rows = MemoryMessage.objects.filter(
            tenant_id=obj.tenant_id,
            unit_id=obj.unit_id,
            index__gte=obj.start_index,
            index__lt=obj.end_index,
        ).order_by("index")
        return format_html(
            '<table class="memory-slice"><thead><tr><th>summary</th><th>raw messages</th></tr>'
            '</thead><tbody><tr><td style="vertical-align: top; white-space: pre-wrap; '
            'width: 35%">{}</td><td style="vertical-align: top">{}</td></tr></tbody></table>',
            obj.summary,
            _messages_table(rows, "index"),
        )


@admin.register(MemoryMessage)
class MemoryMessageAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ("unit", "index", "role", "text_brief", "at")
    list_filter = (("tenant", RelatedOnlyFilter), "role", "at")
    search_fields = ("text", "=unit__id")
    list_select_related = ("unit",)
    ordering = ("-at",)
    show_full_result_count = False
    fields = ("unit", "tenant", "index", "role", "at", "session_id", "message_id", "text")
    readonly_fields = fields

    @admin.display(description="text")
    def text_brief(self, obj: MemoryMessage) -> str:
        return _brief(obj.text)


@admin.register(DialogueMessage)
class DialogueMessageAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ("core", "seq", "role", "text_brief", "at")
    list_filter = (("tenant", RelatedOnlyFilter), "role", "at")
    search_fields = ("text", "=core__id")
    list_select_related = ("core",)
    ordering = ("core", "-seq")
    show_full_result_count = False
    fields = ("core", "tenant", "seq", "role", "at", "session_id", "message_id", "text")
    readonly_fields = fields

    @admin.display(description="text")
    def text_brief(self, obj: DialogueMessage) -> str:
        return _brief(obj.text)


def _not_rolled(core: MemoryCore) -> str:
    """Why a core asked to roll now was not (QA: "not due" said nothing): a forced
    rolling leaves the newest ``keep`` messages, and never splits a turn."""
    count = MemoryCore.objects.filter(pk=core.pk).values_list("window_count", flat=True).first()
    keep = RollingOptions.build().keep
    if not count:
        return f"Core {core.pk}: not rolled: its window is empty"
    held = f"its window holds {count} message{'s' if count != 1 else ''}"
    if count <= keep:
        return (
            f"Core {core.pk}: not rolled: {held}, and rolling keeps the newest {keep} "
            "(FORGE_MEMORY_ROLL_KEEP)"
        )
    return (
        f"Core {core.pk}: not rolled: {held}; rolling keeps the newest {keep} "
        "(FORGE_MEMORY_ROLL_KEEP) and never splits a turn, and the turn they begin in "
        "holds the older ones"
    )
