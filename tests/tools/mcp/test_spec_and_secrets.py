"""The ``mcpServers`` shape (clear errors for bad specs), and secrets: env values and
header values never reach the log, the admin's pages, or a notice."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from django.urls import reverse

from forge.tools.mcp import McpSpecError, parse_servers, redacted, with_secrets_kept
from forge.tools.mcp.spec import MASK

from .conftest import misbehaving, run_turn, text_reply, use_servers

SECRET = "sekret-value-9f3a"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "must be a JSON object"),
        ({"a_b": {"command": "x"}}, "use 1-32 letters"),
        ({"s": "npx thing"}, "must be an object"),
        ({"s": {}}, "either command (stdio) or url"),
        ({"s": {"command": "x", "url": "http://h/"}}, "either command (stdio) or url"),
        ({"s": {"command": ""}}, "command must be a non-empty string"),
        ({"s": {"command": "x", "args": "a b"}}, "args must be a list of strings"),
        ({"s": {"command": "x", "env": {"K": 1}}}, "env must be an object of strings"),
        ({"s": {"url": "ftp://h/"}}, "url must be an http(s) URL"),
        ({"s": {"url": "http://h/", "headers": ["a"]}}, "headers must be an object of strings"),
        ({"s": {"command": "x", "cwd": "/"}}, "unknown keys cwd"),
    ],
)
def test_bad_specs_are_refused_with_a_clear_message(raw: Any, message: str) -> None:
    with pytest.raises(McpSpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_servers(raw)


def test_good_specs_parse_and_secrets_are_masked_and_kept_on_edit() -> None:
    raw = {
        "local": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TOKEN": SECRET}},
        "remote": {"url": "https://mcp.example/mcp", "headers": {"Authorization": SECRET}},
    }
    specs = parse_servers(raw)
    assert specs["local"].transport == "stdio"
    assert specs["remote"].transport == "http"
    shown = redacted(raw)
    assert SECRET not in json.dumps(shown)
    assert shown["local"]["env"] == {"TOKEN": MASK}
    edited = json.loads(json.dumps(shown))
    edited["local"]["args"] = ["mcp-server-time", "--local-timezone=UTC"]
    edited["remote"]["headers"]["X-New"] = "plain"
    kept = with_secrets_kept(edited, raw)
    assert kept["local"]["env"] == {"TOKEN": SECRET}
    assert kept["remote"]["headers"] == {"Authorization": SECRET, "X-New": "plain"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
async def test_env_and_header_values_never_reach_the_log(session, agents, script) -> None:
    from channels.db import database_sync_to_async

    from sessions import selectors

    await use_servers(
        {
            "bad": {**misbehaving(), "env": {"SECRET_TOKEN": SECRET}},
            "gone": {"command": sys.executable, "args": ["-c", "0"], "env": {"K": SECRET}},
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": SECRET}},
        }
    )
    script([text_reply("ok")])
    await run_turn(session, "hello")
    log = await database_sync_to_async(lambda: list(selectors.iter_log(session=session)))()
    text = json.dumps(log)
    assert "bad_echo" in text  # the servers were there
    assert "gone" in text
    assert "web" in text
    assert SECRET not in text


@pytest.mark.django_db
def test_the_admin_shows_secrets_masked_and_keeps_them_on_save(admin_client, django_user_model):
    from django.contrib.auth.models import Permission

    from forge.models import Agent

    servers = {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ_KEY": SECRET}}}
    agent = Agent.objects.create(name="timely", mcp_servers=servers)
    url = reverse("admin:forge_agent_change", args=[agent.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.text
    assert "TZ_KEY" in page.text
    shown = redacted(servers)
    shown["time"]["args"] = ["mcp-server-time", "--local-timezone=UTC"]
    response = admin_client.post(
        url, {"name": "timely", "step_limit": 10, "mcp_servers": json.dumps(shown)}
    )
    assert response.status_code == 302, response.content[:2000]
    agent.refresh_from_db()
    assert agent.mcp_servers["time"]["env"] == {"TZ_KEY": SECRET}
    assert agent.mcp_servers["time"]["args"][-1] == "--local-timezone=UTC"

    bad = admin_client.post(
        url, {"name": "timely", "step_limit": 10, "mcp_servers": json.dumps({"t": {}})}
    )
    assert bad.status_code == 200
    assert "either command (stdio) or url" in bad.text

    viewer = django_user_model.objects.create_user(
        username="viewer", password="pw-viewer-123", is_staff=True
    )
    viewer.user_permissions.add(Permission.objects.get(codename="view_agent"))
    admin_client.force_login(viewer)
    page = admin_client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.text
    assert MASK in page.text


def test_only_superusers_add_change_or_delete_agents(client, django_user_model):
    """A third-round finding (HIGH): a tenant's staff user given ``add_agent`` /
    ``change_agent`` could give an agent an MCP server whose command is a shell, run as
    the server, and change the agents of every tenant."""
    from django.contrib.auth.models import Permission

    from forge.models import Agent

    agent = Agent.objects.create(name="shared")
    staff = django_user_model.objects.create_user(
        username="sally", password="pw-sally-123", is_staff=True
    )
    staff.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["add_agent", "change_agent", "delete_agent", "view_agent"]
        )
    )
    client.force_login(staff)
    add = client.post(
        reverse("admin:forge_agent_add"),
        {
            "name": "pwn",
            "step_limit": 10,
            "mcp_servers": json.dumps({"p": {"command": "/bin/sh", "args": ["-c", "id"]}}),
        },
    )
    assert add.status_code == 403
    change = reverse("admin:forge_agent_change", args=[agent.pk])
    assert client.post(change, {"name": "shared", "step_limit": 1}).status_code == 403
    assert client.get(change).status_code == 200  # viewing stays
    delete = reverse("admin:forge_agent_delete", args=[agent.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert not Agent.objects.filter(name="pwn").exists()
    assert Agent.objects.get(name="shared").step_limit == 10


def test_a_url_s_key_is_masked_where_it_is_shown() -> None:
    """A third-round finding: a server that failed with an HTTP error put its URL, query
    and all (``?api_key=…``), in every user's context block, the model's input and the
    log; the admin's masked view showed it too."""
    import httpx

    from forge.tools.mcp.connection import _reason
    from forge.tools.mcp.spec import with_secrets_kept

    url = f"https://user:{SECRET}@mcp.example/mcp?api_key={SECRET}"
    request = httpx.Request("POST", url)
    error = httpx.HTTPStatusError(
        "Client error '401 Unauthorized' for url " + repr(url),
        request=request,
        response=httpx.Response(401, request=request),
    )
    reason = _reason(ExceptionGroup("failed", [error]))
    assert SECRET not in reason
    assert "mcp.example/mcp" in reason  # which server, still
    stored = {"remote": {"url": url}}
    shown = redacted(stored)
    assert SECRET not in json.dumps(shown)
    assert with_secrets_kept(shown, stored) == stored  # saved unchanged, the key kept


def test_a_secret_on_the_command_line_is_masked_where_it_is_shown() -> None:
    """A fourth-round finding: env, header and URL secrets were masked in the admin, but
    ``"args": ["--token", "…"]`` was shown in clear to every staff user."""
    from forge.tools.mcp.spec import MASK, redacted, with_secrets_kept

    stored = {
        "s1": {
            "command": "/bin/true",
            "args": ["serve", "--token", SECRET, f"--api-key={SECRET}", "--port", "8080", "-v"],
        }
    }
    shown = redacted(stored)
    assert SECRET not in str(shown)
    assert shown["s1"]["args"] == [
        "serve",
        "--token",
        MASK,
        f"--api-key={MASK}",
        "--port",
        "8080",
        "-v",
    ]
    assert with_secrets_kept(shown, stored) == stored  # saved as shown: kept
    edited = {"s1": {**shown["s1"], "args": ["serve", "--token", "new"]}}
    assert with_secrets_kept(edited, stored)["s1"]["args"] == ["serve", "--token", "new"]
