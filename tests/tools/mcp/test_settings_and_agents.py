"""FORGE_MCP_SERVERS is read from the environment once, as a JSON object; an agent's
servers are the deployment's with its own over them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from forge.settings.env import env_json_object


def test_the_setting_is_a_json_object_and_errors_do_not_quote_the_value(monkeypatch):
    monkeypatch.setenv("FORGE_MCP_SERVERS", '{"time": {"command": "uvx"}}')
    assert env_json_object("FORGE_MCP_SERVERS") == {"time": {"command": "uvx"}}
    monkeypatch.setenv("FORGE_MCP_SERVERS", "  ")
    assert env_json_object("FORGE_MCP_SERVERS") == {}
    monkeypatch.setenv("FORGE_MCP_SERVERS", '{"t": {"env": {"K": "sekret-77"}}')
    with pytest.raises(ImproperlyConfigured, match="must be a JSON object") as error:
        env_json_object("FORGE_MCP_SERVERS")
    assert "sekret-77" not in str(error.value)
    monkeypatch.setenv("FORGE_MCP_SERVERS", "[1]")
    with pytest.raises(ImproperlyConfigured, match="not list"):
        env_json_object("FORGE_MCP_SERVERS")


@pytest.mark.django_db
def test_an_agent_has_the_deployment_servers_with_its_own_over_them(settings):
    from forge.models import Agent
    from forge.runtime.agents import get_agent

    settings.FORGE_MCP_SERVERS = {
        "time": {"command": "deploy-time"},
        "web": {"url": "http://deploy/mcp"},
    }
    Agent.objects.create(name="timely", mcp_servers={"time": {"command": "own-time"}})
    servers = get_agent("timely").mcp_servers
    assert servers == {"time": {"command": "own-time"}, "web": {"url": "http://deploy/mcp"}}


@pytest.mark.django_db
def test_an_agent_with_a_bad_spec_is_refused_by_validation():
    from django.core.exceptions import ValidationError

    from forge.models import Agent

    agent = Agent(name="broken", mcp_servers={"x": {"command": "a", "url": "http://b/"}})
    with pytest.raises(ValidationError, match="either command"):
        agent.full_clean()
