"""Agents as the runtime uses them: an immutable snapshot of the ``Agent`` row."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from forge.errors import UnknownAgent
from forge.models import Agent
from forge.tools.mcp import merged
from sessions.models import Session

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")  # forge.models.AGENT_NAME
MENTION = re.compile(r"(?<![\w@/.])@([a-z][a-z0-9_-]{0,63})\b")


@dataclass(frozen=True)
class AgentConfig:
    name: str
    system_prompt: str = ""
    model: str = ""  # provider/model; "" means FORGE_MODEL
    tools: list[str] = field(default_factory=list)  # allowed tools; empty: all
    step_limit: int = 10
    temperature: float | None = None
    context_limit: int | None = None  # None: FORGE_CONTEXT_LIMITS
    auto_compact: bool | None = None  # None: FORGE_AUTO_COMPACT
    # mcpServers: FORGE_MCP_SERVERS, then the agent's own (same name: the agent's wins).
    mcp_servers: dict[str, Any] = field(default_factory=dict)
    tool_approval: Any = None  # approval rules, before FORGE_TOOL_APPROVAL

    @property
    def resolved_model(self) -> str:
        return self.model or settings.FORGE_MODEL


FALLBACK = AgentConfig(name="build", system_prompt="You are a helpful assistant.")


def configured_models() -> set[str]:
    """The models a prompt of this server can run on: ``FORGE_MODEL`` (an agent without
    a model of its own) and every agent's model. A model a log names (an imported one)
    may be any other: it is no choice of this server's."""
    return {settings.FORGE_MODEL, *(m for m in Agent.objects.values_list("model", flat=True) if m)}


def reply_agent_and_model(info: Mapping[str, Any]) -> tuple[AgentConfig, str]:
    """The agent a reply (its message ``info``) runs under, and the model it runs on:
    the model its message names when this server configures it, else the agent's. The
    log says what it likes when it was imported: a waiting call imported under any model
    name had the server call that model, with its key, unpriced (QA). An approval's
    resumption runs the reply on it, and recovery prices the step it cut by it."""
    try:
        agent = get_agent(info.get("agent") or "")
    except UnknownAgent:
        agent = default_agent()
    model = info.get("model") or {}
    logged = (
        f"{model['provider']}/{model['model']}"
        if isinstance(model, dict) and model.get("provider") and model.get("model")
        else None
    )
    return agent, logged if logged in configured_models() else agent.resolved_model


def _config(agent: Agent) -> AgentConfig:
    return AgentConfig(
        name=agent.name,
        system_prompt=agent.system_prompt,
        model=agent.model,
        tools=list(agent.tools or []),
        step_limit=agent.step_limit,
        temperature=agent.temperature,
        context_limit=agent.context_limit,
        auto_compact=agent.auto_compact,
        mcp_servers=merged(settings.FORGE_MCP_SERVERS, agent.mcp_servers),
        tool_approval=agent.tool_approval or None,
    )


_FIELDS = Agent._meta.concrete_fields
_COLUMNS = ", ".join(f'"{f.column}"' for f in _FIELDS)  # the model's own column names


def _read_agent(where: str, params: list[Any]) -> Agent | None:
    """One ``Agent`` row by plain SQL (every prompt reads one: no ORM compile), its
    values converted as the ORM converts them (JSON, booleans, per backend)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {_COLUMNS} FROM {Agent._meta.db_table} {where} LIMIT 1",  # noqa: S608
            params,
        )
        row = cursor.fetchone()
    if row is None:
        return None
    values = []
    columns = _converters(connection.alias, connection.vendor)
    for (col, converters), value in zip(columns, row, strict=True):
        for convert in converters:
            value = convert(value, col, connection)
        values.append(value)
    return Agent.from_db(connection.alias, _ATTNAMES, values)


_ATTNAMES = [f.attname for f in _FIELDS]


@functools.cache
def _converters(alias: str, vendor: str) -> list[tuple[Any, list[Any]]]:
    """Each column with the converters the ORM applies to its values on this backend
    (the same for every row: worked out once per database, not per prompt; they read
    the connection they are passed, and its settings, such as its time zone, are the
    same on every thread)."""
    columns = []
    for model_field in _FIELDS:
        col = model_field.get_col(Agent._meta.db_table)
        columns.append(
            (col, [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)])
        )
    return columns


def get_agent(name: str) -> AgentConfig:
    """The agent ``name``; ``UnknownAgent`` when there is none. A name no agent can have
    (``forge.models.AGENT_NAME``; a NUL, say, which PostgreSQL refuses even in a
    lookup) is refused without a query, in the same words."""
    possible = isinstance(name, str) and _NAME.fullmatch(name) is not None
    agent = _read_agent("WHERE name = %s", [name]) if possible else None
    if agent is None:
        known = ", ".join(Agent.objects.values_list("name", flat=True)) or "none"
        raise UnknownAgent(f"no agent named {name!r} (agents: {known})")
    return _config(agent)


def on_session_imported(sender: Any, session: Session, **kwargs: Any) -> None:
    """``sessions.signals.session_imported``: the imported session's agent must be one of
    this server's (``UnknownAgent``, 400, and the import's transaction is rolled back),
    as ``PATCH`` and ``POST /api/sessions/`` refuse an unknown one. Imported as it
    was, every prompt to it then failed with ``unknown_agent``. No agent (the default)
    is always fine; the agents that messages of the history name are not checked: they
    are what happened."""
    if session.agent:
        get_agent(session.agent)


def default_agent() -> AgentConfig:
    # The default agent, else the first by name (at most one is default: one_default_agent).
    agent = _read_agent("ORDER BY is_default DESC, name", [])
    if agent:
        return _config(agent)
    return dataclasses.replace(FALLBACK, mcp_servers=merged(settings.FORGE_MCP_SERVERS, None))


def mentioned_agent(text: str) -> str | None:
    """The first ``@name`` in the text that names an agent, if any."""
    names = MENTION.findall(text)
    if not names:
        return None
    known = set(Agent.objects.filter(name__in=names).values_list("name", flat=True))
    return next((name for name in names if name in known), None)
