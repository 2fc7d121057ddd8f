from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from forge.tools import all_tools

from .models import Agent, SessionLease


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
            "is_default",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tools_field = self.fields["tools"]
        assert isinstance(tools_field, forms.MultipleChoiceField)
        tools_field.choices = [(t.name, f"{t.name}: {t.description[:80]}") for t in all_tools()]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ("name", "description", "model", "step_limit", "temperature", "is_default")
    list_filter = ("is_default",)
    search_fields = ("name", "description", "system_prompt")


@admin.register(SessionLease)
class SessionLeaseAdmin(admin.ModelAdmin):
    """Who runs which turn right now. Read-only: leases belong to the runtime."""

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
