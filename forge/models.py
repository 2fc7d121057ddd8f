"""The runtime's models: configured agents, and the lease that makes one runner per session."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from sessions.models import Part


def validate_mcp_servers(value: object) -> None:
    """An agent's ``mcp_servers`` must be a valid ``mcpServers`` object."""
    from forge.tools.mcp.spec import McpSpecError, parse_servers  # not at import: the SDK

    try:
        parse_servers(value)
    except McpSpecError as exc:
        raise ValidationError(str(exc)) from None


def _valid_rules(value: Any) -> None:
    from forge.runtime.approvals.rules import InvalidRules, parse_rules

    try:
        parse_rules(value, where="tool_approval")
    except InvalidRules as exc:
        raise ValidationError(str(exc)) from None


AGENT_NAME = RegexValidator(r"^[a-z][a-z0-9_-]{0,63}$", "lower-case letters, digits, - and _")


class Agent(models.Model):
    """A named configuration of the model: system prompt, model, tools, limits.

    ``@name`` in a prompt routes the turn to the agent; the ``task`` tool runs a
    subtask with one. Editable in the admin.
    """

    name = models.CharField(max_length=64, unique=True, validators=[AGENT_NAME])
    description = models.CharField(max_length=255, blank=True)
    system_prompt = models.TextField(blank=True)
    model = models.CharField(
        max_length=128, blank=True, help_text="provider/model; blank: FORGE_MODEL"
    )
    tools = models.JSONField(
        default=list, blank=True, help_text="allowed tool names; empty: every tool"
    )
    step_limit = models.PositiveSmallIntegerField(
        default=10, validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    temperature = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(2.0)]
    )
    context_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1024)],
        help_text="tokens the model's window holds; blank: FORGE_CONTEXT_LIMITS",
    )
    auto_compact = models.BooleanField(
        null=True, blank=True, help_text="compact automatically on overflow; blank: the setting"
    )
    tool_approval = models.JSONField(
        default=dict,
        blank=True,
        validators=[_valid_rules],
        help_text='approval rules: {"<tool or glob>": "allow"|"ask"|"deny"} or a list of '
        '{"tool", "pointer", "pattern", "action"}; before FORGE_TOOL_APPROVAL (docs/approvals.md)',
    )
    is_default = models.BooleanField(
        default=False, help_text="used when a prompt names no agent and the session has none"
    )
    mcp_servers = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_mcp_servers],
        help_text='MCP servers, as other MCP clients write mcpServers: {"name": {"command", '
        '"args", "env"}} (stdio) or {"name": {"url", "headers"}} (streamable HTTP); over '
        "FORGE_MCP_SERVERS. Their tools are named <name>_<tool>.",
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="one_default_agent"
            )
        ]

    def __str__(self) -> str:
        return self.name


class SessionLease(models.Model):
    """Who runs the session's current turn. At most one row per session.

    The owner renews ``expires_at`` while the turn runs; a lease whose owner died
    expires, and the next process to look finalizes the turn it left open.
    """

    session = models.OneToOneField(
        "forge_sessions.Session", on_delete=models.CASCADE, primary_key=True, related_name="lease"
    )
    owner = models.CharField(max_length=200)
    message_id = models.CharField(max_length=64, help_text="the assistant message being written")
    acquired_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.session_id} held by {self.owner}"


class PendingApproval(Part):
    """A tool call awaiting approval, for the admin (a view of the session's parts: the
    log is the truth, this reads the projection; docs/approvals.md)."""

    class Meta:
        proxy = True
        verbose_name = "pending approval"
