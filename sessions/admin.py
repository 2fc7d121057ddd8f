"""Operators' view of the store: sessions with their event timeline, messages with parts.

Everything here is read-only except a session's title (renamed through
``services.update_session``, so the rename is logged) and deleting a session
(through ``services.delete_session``, the only way to remove a log).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from accounts.admin import ReadOnlyAdmin, RelatedOnlyFilter, TenantScopedAdmin

from . import selectors, services
from .conversation import PAGE, conversation
from .exceptions import InvalidCursor, InvalidEvent
from .log import format_time
from .models import Message, Part, Session, SessionEvent
from .services.session import clean_title

TIMELINE_LENGTH = 50


def _brief(data: Any, limit: int = 120) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _part_summary(data: dict[str, Any]) -> str:
    kind = data.get("type")
    if kind in ("text", "reasoning"):
        return _brief(data.get("text", ""), 160)
    if kind == "tool":
        state = data.get("state", {})
        return f"{data.get('tool')} [{state.get('status')}]"
    return _brief({k: v for k, v in data.items() if k not in ("id", "message_id", "session_id")})


class SessionForm(forms.ModelForm):
    """A title is checked as the store checks it (``services.session.clean_title``): a control
    character (a pasted tab) was a 500 at save, the store refusing what the form let
    through (QA); it is now the form's error, and nothing is written."""

    class Meta:
        model = Session
        fields = ("title",)

    def clean_title(self) -> str:
        try:
            return clean_title(self.cleaned_data["title"])
        except InvalidEvent as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(Session)
class SessionAdmin(TenantScopedAdmin, admin.ModelAdmin):
    form = SessionForm
    list_display = ("id", "title", "tenant", "user", "agent", "event_count", "updated_at")
    list_filter = (("tenant", RelatedOnlyFilter), "agent", "created_at")
    search_fields = ("id", "title", "user__username")
    list_select_related = ("tenant", "user")
    date_hierarchy = "created_at"
    ordering = ("-updated_at",)
    fields = (
        "id",
        "title",
        "tenant",
        "user",
        "agent",
        "parent",
        "created_at",
        "updated_at",
        "conversation",
        "timeline",
    )
    readonly_fields = (
        "id",
        "tenant",
        "user",
        "agent",
        "parent",
        "created_at",
        "updated_at",
        "conversation",
        "timeline",
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # sessions start from the API or the chat page, with a user and a tenant

    # One count of the list, not two (the whole table's, then the filtered one's).
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Session]:
        """Each session's event count is its log's last seq (seqs run 1, 2, … with no
        gap), read from the (session, seq) index for the page's rows only. A
        ``Count("events")`` grouped the join of every session with every event, in the
        list's query, its count and the date hierarchy's: 2-3 s at 11,000 sessions and
        66,000 events (QA), growing with the log."""
        head = SessionEvent.objects.filter(session=OuterRef("pk")).order_by("-seq").values("seq")
        return (
            super()
            .get_queryset(request)
            .annotate(_events=Coalesce(Subquery(head[:1]), 0, output_field=IntegerField()))
        )

    @admin.display(description="events", ordering="_events")
    def event_count(self, obj: Session) -> int:
        return getattr(obj, "_events", 0)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.conversation_view)
        extra = [
            path(
                "<str:object_id>/conversation/",
                view,
                name="forge_sessions_session_conversation",
            )
        ]
        return extra + super().get_urls()

    @admin.display(description="conversation (newest messages)")
    def conversation(self, obj: Session) -> SafeString:
        page = selectors.message_page(tenant=obj.tenant, session_id=obj.pk, limit=PAGE)
        url = reverse("admin:forge_sessions_session_conversation", args=[obj.pk])
        older = (
            format_html('<p><a href="{}?before={}">Older messages</a></p>', url, page.next_before)
            if page.next_before
            else ""
        )
        rendered = render_to_string(
            "admin/forge_sessions/session/conversation_messages.html",
            {"messages": conversation(page.items)},
        )
        return format_html("{}{}", older, SafeString(rendered))

    def conversation_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The whole conversation, a page of ``PAGE`` messages at a time (``?before=``
        a message id: the page of messages older than it)."""
        session = self.get_object(request, object_id)
        if session is None or not self.has_view_permission(request, session):
            raise Http404("no such session")
        before = request.GET.get("before") or None
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "session": session,
            "title": "Conversation",
            "before": before,
        }
        try:
            page = selectors.message_page(
                tenant=session.tenant, session_id=session.pk, limit=PAGE, before=before
            )
        except InvalidCursor as exc:
            context["error"] = str(exc)
        else:
            context.update(messages=conversation(page.items), next_before=page.next_before)
        return TemplateResponse(request, "admin/forge_sessions/session/conversation.html", context)

    @admin.display(description="timeline (newest first)")
    def timeline(self, obj: Session) -> SafeString:
        events = list(obj.events.order_by("-seq")[:TIMELINE_LENGTH])
        all_events = reverse("admin:forge_sessions_sessionevent_changelist") + (
            f"?session__id__exact={obj.pk}"
        )
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            ((e.seq, e.type, format_time(e.at), _brief(e.data)) for e in events),
        )
        return format_html(
            "<table><thead><tr><th>seq</th><th>type</th><th>at</th><th>data</th></tr></thead>"
            '<tbody>{}</tbody></table><p><a href="{}">All events of this session</a></p>',
            rows,
            all_events,
        )

    def save_model(self, request: HttpRequest, obj: Session, form: Any, change: bool) -> None:
        if change and "title" in form.changed_data:
            services.update_session(session=obj, title=form.cleaned_data["title"])

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        services.delete_session(session=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        for session in queryset:
            services.delete_session(session=session)

    def get_deleted_objects(
        self, objs: Iterable[Session], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """Summarise instead of listing every event: a log can hold millions."""
        sessions = list(objs)
        ids = [s.pk for s in sessions]
        counts = {
            "sessions": len(sessions),
            "session events": SessionEvent.objects.filter(session_id__in=ids).count(),
            "messages": Message.objects.filter(session_id__in=ids).count(),
            "parts": Part.objects.filter(session_id__in=ids).count(),
        }
        summary = [f"Session: {s} ({s.pk}), with its whole log" for s in sessions]
        return summary, counts, set(), []


@admin.register(SessionEvent)
class SessionEventAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ("session", "seq", "type", "at", "data_brief")
    list_filter = ("type",)
    search_fields = ("=session__id", "=id", "type")
    list_select_related = ("session",)
    ordering = ("session", "-seq")
    show_full_result_count = False
    fields = ("id", "session", "tenant", "seq", "type", "at", "hash", "data_pretty")
    readonly_fields = fields

    @admin.display(description="data")
    def data_brief(self, obj: SessionEvent) -> str:
        return _brief(obj.data)

    @admin.display(description="data")
    def data_pretty(self, obj: SessionEvent) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(obj.data, indent=2, ensure_ascii=False))


class PartInline(ReadOnlyAdmin, admin.TabularInline):
    model = Part
    fields = ("id", "type", "summary", "seq")
    readonly_fields = fields
    ordering = ("id",)
    extra = 0
    can_delete = False

    @admin.display(description="content")
    def summary(self, obj: Part) -> str:
        return _part_summary(obj.data)


@admin.register(Message)
class MessageAdmin(TenantScopedAdmin, ReadOnlyAdmin, admin.ModelAdmin):
    list_display = ("id", "session", "role", "created", "finish", "part_count")
    list_filter = ("role", ("tenant", RelatedOnlyFilter))
    search_fields = ("=id", "=session__id", "session__title")
    list_select_related = ("session",)
    ordering = ("-id",)
    inlines = (PartInline,)
    fields = ("id", "session", "tenant", "role", "seq", "info")
    readonly_fields = fields

    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        """Each message's part count from the (message, id) index, for the page's rows
        only (a ``Count("parts")`` grouped the join of every message with every part, in
        the list's query and its counts: ~1 s each at 21,000 messages)."""
        parts = (
            Part.objects.filter(message=OuterRef("pk"))
            .order_by()
            .values("message")
            .annotate(n=Count("*"))
            .values("n")
        )
        return (
            super()
            .get_queryset(request)
            .annotate(_parts=Coalesce(Subquery(parts), 0, output_field=IntegerField()))
        )

    @admin.display(description="parts", ordering="_parts")
    def part_count(self, obj: Message) -> int:
        return getattr(obj, "_parts", 0)

    @admin.display(description="created")
    def created(self, obj: Message) -> str:
        return str(obj.data.get("created_at", ""))

    @admin.display(description="finish")
    def finish(self, obj: Message) -> str:
        return str(obj.data.get("finish") or "")

    @admin.display(description="info")
    def info(self, obj: Message) -> SafeString:
        return format_html("<pre>{}</pre>", json.dumps(obj.data, indent=2, ensure_ascii=False))
