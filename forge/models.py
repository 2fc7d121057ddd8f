"""The runtime's models: configured agents, and the lease that makes one runner per session.

The lease, usage and budget rows are the tenant's: on PostgreSQL their primary keys
are ``(…, tenant_id)`` in the database while Django's pk stays ``session`` / ``id``
(``forge/migrations/0008_citus_keys.py``, ``forge.db.citus``: ready for Citus).
Agents are shared by every tenant (a reference table under Citus)."""

from __future__ import annotations

from decimal import Decimal
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


NANOS = 10**9  # cost units in one unit of cost (Usage.cost_nanos)

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
    # The session's tenant, copied: the lease is distributed by it with the session
    # (docs/deploy.md, "Citus"), and the database's keys include it (forge.db.citus).
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    owner = models.CharField(max_length=200)
    message_id = models.CharField(max_length=64, help_text="the assistant message being written")
    acquired_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    # What the turn holds against budgets while it runs (forge.usage.budgets.reserve):
    # set in the prompt's transaction when a budget applies, gone with the lease. Database
    # defaults, so the lease's plain-SQL upsert needs not name them (it resets them).
    reserved_by = models.BigIntegerField(
        null=True, blank=True, help_text="the speaker whose budget the running turn holds"
    )
    reserved_tokens = models.BigIntegerField(db_default=0, default=0)
    reserved_cost_nanos = models.BigIntegerField(db_default=0, default=0)

    def __str__(self) -> str:
        return f"{self.session_id} held by {self.owner}"


class PendingApproval(Part):
    """A tool call awaiting approval, for the admin (a view of the session's parts: the
    log is the truth, this reads the projection; docs/approvals.md)."""

    class Meta:
        proxy = True
        verbose_name = "pending approval"


class UsageCounts(models.Model):
    """The key and the counters of a usage row (:class:`Usage`, :class:`RetiredUsage`)."""

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE)
    # Who spoke, as the log says. No constraint: a reply's completion must never fail
    # because its speaker was deleted meanwhile, and what was used stays counted.
    user = models.ForeignKey(
        "accounts.User", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    agent = models.CharField(max_length=64, blank=True)
    model = models.CharField(max_length=200, blank=True, help_text="provider/model")
    day = models.DateField()
    turns = models.PositiveBigIntegerField(default=0)
    steps = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    # Cost in billionths of the unit step-finish parts record it in: integers add up
    # exactly on both engines, in any order (SQLite keeps decimals as floats).
    cost_nanos = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0, help_text="replies ended by an error")
    aborted = models.PositiveBigIntegerField(default=0, help_text="replies aborted")
    tool_calls = models.PositiveBigIntegerField(default=0)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.day} {self.user_id} {self.agent} {self.model}"

    @property
    def cost(self) -> Decimal:
        return Decimal(self.cost_nanos) / NANOS


class Usage(UsageCounts):
    """What the turns of one (tenant, user, agent, model, UTC day) used: a fold of the
    logs, kept current in the transaction that completes each reply (forge.usage).

    A reply counts once, when its message goes from open to completed (a finished,
    failed or aborted reply alike), on the UTC day its message was created: its steps
    (``step-finish`` parts), their tokens and cost, its tool calls (``tool`` parts),
    and its outcome. A copy made by fork arrives completed and never counts;
    ``rebuild_usage`` recomputes the table from the logs by the same rule, plus
    :class:`RetiredUsage` (the logs deleted since).
    """

    class Meta:
        verbose_name_plural = "usage"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "agent", "model", "day"], name="usage_key"
            )
        ]
        indexes = [models.Index(fields=["tenant", "day"], name="usage_tenant_day")]


class RetiredUsage(UsageCounts):
    """What the logs of deleted sessions had added to :class:`Usage`, per key: the fold
    of each log, added in the transaction that deletes it. Deleting a session takes
    nothing from the usage table, and ``rebuild_usage`` (which can fold only the logs
    that remain) adds these rows, so a rebuild gives back what was counted."""

    class Meta:
        verbose_name_plural = "retired usage"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "agent", "model", "day"], name="retiredusage_key"
            )
        ]


class SideUsage(UsageCounts):
    """Model calls that no session's log records, per key: a session's title by the small
    model (its tokens and cost, no turn). Counted in :class:`Usage` when made and kept
    here in the same transaction, so that ``rebuild_usage`` (which folds the logs) adds
    them back, as it adds :class:`RetiredUsage`."""

    class Meta:
        verbose_name_plural = "side usage"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "agent", "model", "day"], name="sideusage_key"
            )
        ]


class Budget(models.Model):
    """A monthly limit (UTC calendar month) on a tenant's use, or on one user's use in
    it: in tokens (input + output, which holds reasoning), in cost, or both. A prompt is refused
    once the month's use has reached a limit (forge.usage.budgets); a reply that
    crosses it mid-turn finishes."""

    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.CASCADE)
    user = models.ForeignKey(
        "accounts.User",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        help_text="empty: the whole tenant's limit",
    )
    monthly_tokens = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="tokens (input + output, reasoning included) a month"
    )
    monthly_cost = models.DecimalField(
        max_digits=24,
        decimal_places=10,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="cost a month, in the unit step-finish parts record",
    )

    class Meta:
        constraints = [
            # Said as an operator reads it in the admin (it said "Constraint
            # “budget_tenant” is violated.").
            models.UniqueConstraint(
                fields=["tenant"],
                condition=models.Q(user=None),
                name="budget_tenant",
                violation_error_message="This tenant already has a budget: edit that one.",
            ),
            models.UniqueConstraint(
                fields=["tenant", "user"],
                name="budget_tenant_user",
                violation_error_message="This user already has a budget: edit that one.",
            ),
        ]

    def __str__(self) -> str:
        return f"budget of {self.user or self.tenant}"
