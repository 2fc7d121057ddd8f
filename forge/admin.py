from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from accounts.admin import BoundedSearchAdmin, RelatedOnlyFilter, TenantScopedAdmin
from forge.context import COMPACTION_PROMPT, request_for
from forge.context.compacted import filter_compacted
from forge.context.pruning import PLACEHOLDER_START, is_pruned
from forge.context.rolled import drop_rolled, rolled_kept, rolled_through
from forge.errors import SessionBusy, UnknownModel
from forge.params import parse_seq
from forge.providers import check_model
from forge.tools import all_tools
from sessions import selectors
from sessions.admin import SessionAdmin
from sessions.exceptions import InvalidCursor, NotFound
from sessions.models import Session
from sessions.projector import fold_context

from .models import Agent, PendingApproval, SessionLease
from .runtime import lease
from .runtime.approvals.pending import approval_of
from .tools.mcp.spec import MASK, McpSpecError, has_mask, parse_servers, redacted, with_secrets_kept
from .usage import admin as usage_admin  # noqa: F401 - registers Usage and Budget

CONTENT_SHOWN = 4000  # characters of one message shown on the page


class AgentForm(forms.ModelForm):
    tools = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every tool.",
    )

    class Meta:
        model = Agent
        fields = [
            "name",
            "description",
            "system_prompt",
            "model",
            "tools",
            "step_limit",
            "temperature",
            "context_limit",
            "auto_compact",
            "tool_approval",
            "is_default",
            "mcp_servers",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tools_field = self.fields["tools"]
        assert isinstance(tools_field, forms.MultipleChoiceField)
        tools_field.choices = [(t.name, f"{t.name}: {t.description[:80]}") for t in all_tools()]
        # Secrets (env and header values, those in args and URLs) are never sent to the
        # page: they show masked, and a value left masked keeps the stored secret (see
        # clean_mcp_servers); a mask that matches no stored secret, or not surely one, is
        # refused.
        if self.instance.pk is not None:
            self.initial["mcp_servers"] = redacted(self.instance.mcp_servers)

    def clean_model(self) -> str:
        model = str(self.cleaned_data.get("model") or "").strip()
        if model:
            try:
                check_model(model)
            except UnknownModel as exc:
                raise forms.ValidationError(str(exc)) from None
        return model

    def clean_mcp_servers(self) -> Any:
        value = self.cleaned_data.get("mcp_servers")
        stored = self.instance.mcp_servers if self.instance.pk is not None else {}
        value = with_secrets_kept(value, stored)
        if has_mask(value):
            raise forms.ValidationError(
                f"A masked value ({MASK}) cannot be matched to one stored secret (its "
                "option or key was changed or removed, it was moved, or the same option "
                f"appears more than once): replace the {MASK} of that argument or value "
                "by its secret, typed again."
            )
        try:
            parse_servers(value)
        except McpSpecError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value or {}


@admin.register(Agent)
class AgentAdmin(BoundedSearchAdmin, admin.ModelAdmin):
    """Agents are the whole installation's, not a tenant's, and an agent's MCP servers
    name commands this server runs: only superusers add, change or delete them, whatever
    permissions a staff user holds (a tenant's staff user given ``change_agent`` could run
    a shell command as the server, and change every tenant's agents). Others with
    ``view_agent`` see them, secrets masked."""

    form = AgentForm
    list_display = ("name", "description", "model", "step_limit", "temperature", "is_default")
    list_filter = ("is_default",)
    search_fields = ("name", "description", "system_prompt")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    @admin.display(description="MCP servers")
    def mcp_servers_masked(self, obj: Agent) -> str:
        return json.dumps(redacted(obj.mcp_servers), indent=2, ensure_ascii=False)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """A read-only view (no change permission) shows the MCP servers masked: the
        stored value holds secrets."""
        fields = list(super().get_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            fields = ["mcp_servers_masked" if f == "mcp_servers" else f for f in fields]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            readonly.append("mcp_servers_masked")
        return readonly


@admin.register(SessionLease)
class SessionLeaseAdmin(TenantScopedAdmin, admin.ModelAdmin):
    """Who runs which turn right now, in the staff user's tenants. Read-only: leases
    belong to the runtime."""

    tenant_path = "session__tenant"

    list_display = ("session", "owner", "message_id", "heartbeat_at", "expires_at", "live")
    search_fields = ("=session__id", "owner")
    readonly_fields = (
        "session",
        "owner",
        "message_id",
        "acquired_at",
        "heartbeat_at",
        "expires_at",
    )

    @admin.display(boolean=True)
    def live(self, obj: SessionLease) -> bool:
        return obj.expires_at > timezone.now()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PendingApproval)
class PendingApprovalAdmin(TenantScopedAdmin, admin.ModelAdmin):
    """Tool calls awaiting an answer, per tenant (the staff user's tenants; superusers
    all). Read-only: an answer goes through the session's owner (docs/approvals.md)."""

    list_display = ("call_id", "tool", "tenant", "session", "message_id", "expires_at")
    list_filter = (("tenant", RelatedOnlyFilter),)
    search_fields = ("=session__id",)

    def get_queryset(self, request: HttpRequest) -> Any:
        return (
            super()
            .get_queryset(request)
            .filter(type="tool", data__state__status="awaiting-approval")
            .select_related("tenant", "session")
        )

    @admin.display(description="call id")
    def call_id(self, obj: PendingApproval) -> str:
        return str(obj.data.get("call_id", ""))

    @admin.display(description="tool")
    def tool(self, obj: PendingApproval) -> str:
        return str(obj.data.get("tool", ""))

    @admin.display(description="expires at")
    def expires_at(self, obj: PendingApproval) -> str:
        return str(approval_of(obj.data).get("expires_at", ""))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ContextSessionAdmin(SessionAdmin):
    """The session's admin page, with "what the model sees": the derived request at the
    head or at a seq the operator picks, hidden and pruned items marked.

    Deleting goes through the runtime's lease (``lease.delete_session``), as the API's
    ``DELETE`` does: a session running a turn is not deleted (the store's admin deleted
    it under the turn, whose reply was then counted nowhere; QA)."""

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:  # (the view's transaction, its LogEntry included, rolls back)
            return super().delete_view(request, object_id, extra_context)
        except SessionBusy as exc:
            self.message_user(request, f"Not deleted: {exc}.", messages.ERROR)
            change = reverse("admin:forge_sessions_session_change", args=[object_id])
            return HttpResponseRedirect(change)
        except NotFound:  # deleted meanwhile (another operator, the API)
            self.message_user(request, "That session was deleted meanwhile.", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:forge_sessions_session_changelist"))

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """Django's bulk delete, over the selected sessions that run no turn: it logs and
        counts every selected row before deleting, so busy ones were reported deleted
        beside the error saying they were not (review)."""
        actions: dict[str, Any] = super().get_actions(request)
        found = actions.get("delete_selected")
        if found is not None:
            actions["delete_selected"] = (_delete_idle_sessions, found[1], found[2])
        return actions

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        lease.delete_session(session=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        """Each session that runs no turn; those that do stay, and the operator is told."""
        busy = []
        for session in queryset:
            try:
                lease.delete_session(session=session)
            except SessionBusy:
                busy.append(session.pk)
            except NotFound:  # deleted meanwhile
                pass
        if busy:
            self.message_user(
                request,
                f"Not deleted, running a turn (wait for it or abort it): {', '.join(busy)}.",
                messages.ERROR,
            )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*super().get_fields(request, obj), "model_view"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "model_view"]

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.context_view)
        extra = [path("<str:object_id>/context/", view, name="forge_sessions_session_context")]
        return extra + super().get_urls()

    @admin.display(description="what the model sees")
    def model_view(self, obj: Session) -> SafeString:
        url = reverse("admin:forge_sessions_session_context", args=[obj.pk])
        return format_html(
            '<a href="{}">The request the model is sent now, or as of any seq</a>', url
        )

    def context_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        session = self.get_object(request, object_id)
        if session is None or not self.has_view_permission(request, session):
            raise Http404("no such session")
        head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "session": session,
            "head": head,
            "title": "What the model sees",
        }
        try:
            at = request.GET.get("at")
            seq = None if at in (None, "") else parse_seq(at, name="at", default=0)
            model, model_request = request_for(session, at=seq)
        except InvalidCursor as exc:
            context["error"] = str(exc)
            return TemplateResponse(request, "admin/forge_sessions/session/context.html", context)
        if seq is None:
            history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
        else:
            history = selectors.history_at(tenant=session.tenant, session=session, seq=seq)
        blocks = fold_context(
            selectors.context_updates(tenant=session.tenant, session=session, upto_seq=seq)
        )
        compacted = filter_compacted(history)
        through = rolled_through(blocks)
        visible = drop_rolled(compacted, through, rolled_kept(blocks))
        pruned = [
            {"tool": p.get("tool"), "id": p.get("id")}
            for item in visible
            for p in item["parts"]
            if p.get("type") == "tool" and is_pruned(p)
        ]
        messages = []
        for message in model_request.messages:
            content = str(message.get("content") or "")
            mark = ""
            if content == COMPACTION_PROMPT:
                mark = "compaction"
            elif content.startswith(PLACEHOLDER_START):
                mark = "pruned"
            messages.append(
                {
                    "role": message["role"],
                    "mark": mark,
                    "content": content[:CONTENT_SHOWN]
                    + (" …" if len(content) > CONTENT_SHOWN else ""),
                    "calls": [
                        f"{c['function']['name']}({c['function']['arguments'][:300]})"
                        for c in message.get("tool_calls", [])
                    ],
                }
            )
        if messages and messages[0]["mark"] == "compaction" and len(messages) > 1:
            messages[1]["mark"] = "summary"
        context.update(
            model=model,
            at=seq,
            shown_at=head if seq is None else seq,
            system=model_request.system,
            messages=messages,
            tools=[tool.name for tool in model_request.tools],
            total_count=len(history),
            visible_count=len(visible),
            hidden_count=len(history) - len(compacted),
            rolled_count=len(compacted) - len(visible),
            rolled_through=through,
            pruned=pruned,
            boundary=selectors.last_compaction(tenant=session.tenant, session=session, upto_seq=seq)
            if len(compacted) < len(history)
            else None,
        )
        return TemplateResponse(request, "admin/forge_sessions/session/context.html", context)


def _delete_idle_sessions(
    modeladmin: ContextSessionAdmin, request: HttpRequest, queryset: QuerySet[Session]
) -> Any:
    running = set(
        SessionLease.objects.filter(
            session__in=queryset, expires_at__gt=timezone.now()
        ).values_list("session_id", flat=True)
    )
    if running:
        modeladmin.message_user(
            request,
            "Left out, running a turn (wait for it or abort it): "
            + ", ".join(sorted(running))
            + ".",
            messages.WARNING,
        )
    return delete_selected(modeladmin, request, queryset.exclude(pk__in=running))


admin.site.unregister(Session)
admin.site.register(Session, ContextSessionAdmin)
