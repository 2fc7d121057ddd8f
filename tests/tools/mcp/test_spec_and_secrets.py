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
            "argy": {
                "command": sys.executable,
                "args": ["-c", "0", "--header", f"Authorization: Bearer {SECRET}", f"K={SECRET}"],
            },
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
    assert "argy" in text
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

    from forge.tools.mcp.connection import reason as _reason
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


# A fifth-round finding (MEDIUM): secrets in ``args`` other than ``--token X`` were shown
# in clear: a connection string, a header, docker's ``-e NAME=value``, a short ``-k``,
# and a URL's fragment.
@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (
            ["-y", "@modelcontextprotocol/server-postgres", f"postgresql://app:{SECRET}@db/p"],
            ["-y", "@modelcontextprotocol/server-postgres", f"postgresql://{MASK}@db/p"],
        ),
        (["--db=mysql://u:" + SECRET + "@h/d"], [f"--db=mysql://{MASK}@h/d"]),
        (["https://h.example/mcp?key=" + SECRET], [f"https://h.example/mcp?{MASK}"]),
        (["https://h.example/mcp#token=" + SECRET], [f"https://h.example/mcp#{MASK}"]),
        (
            ["mcp-remote", "https://x/mcp", "--header", f"Authorization: Bearer {SECRET}"],
            ["mcp-remote", "https://x/mcp", "--header", f"Authorization: {MASK}"],
        ),
        (["-H", f"X-Trace:{SECRET}"], ["-H", f"X-Trace: {MASK}"]),
        ([f"--header=Cookie: s={SECRET}"], [f"--header=Cookie: {MASK}"]),
        ([f"Authorization: Bearer {SECRET}"], [f"Authorization: {MASK}"]),
        ([f"X-My-Api-Key: {SECRET}"], [f"X-My-Api-Key: {MASK}"]),
        (["Accept: text/plain"], ["Accept: text/plain"]),
        (["token-server:latest", "keycloak:8080"], ["token-server:latest", "keycloak:8080"]),
        (
            ["serve", "ghp_abcdefgh123", f"sk-live-{SECRET}", "sk-learn"],
            ["serve", MASK, MASK, "sk-learn"],
        ),
        (
            ["run", "-e", f"GITHUB_PERSONAL_ACCESS_TOKEN={SECRET}", "ghcr.io/github/x"],
            ["run", "-e", f"GITHUB_PERSONAL_ACCESS_TOKEN={MASK}", "ghcr.io/github/x"],
        ),
        ([f"--env=DB_PASS={SECRET}", "-e", "TZ=UTC"], [f"--env=DB_PASS={MASK}", "-e", "TZ=UTC"]),
        ([f"aws_credentials={SECRET}", "LOG=debug"], [f"aws_credentials={MASK}", "LOG=debug"]),
        (["--api-key", "--verbose", "-k", SECRET], ["--api-key", "--verbose", "-k", MASK]),
        (
            ["--password", SECRET, f"--client-secret={SECRET}"],
            ["--password", MASK, f"--client-secret={MASK}"],
        ),
        (["-token", SECRET], ["-token", MASK]),
        (["-p", "8080", "-t", "5", "-v", "x"], ["-p", "8080", "-t", "5", "-v", "x"]),
        (["--port", "8080", "--mode=fast"], ["--port", "8080", "--mode=fast"]),
    ],
)
def test_secrets_anywhere_in_args_are_masked(args: list[str], shown: list[str]) -> None:
    stored = {"s": {"command": "npx", "args": args}}
    out = redacted(stored)
    assert out["s"]["args"] == shown
    assert with_secrets_kept(json.loads(json.dumps(out)), stored) == stored


def test_a_url_s_fragment_is_masked() -> None:
    stored = {"h": {"url": f"https://u:{SECRET}@h.example/mcp#token={SECRET}"}}
    shown = redacted(stored)
    assert shown["h"]["url"] == f"https://{MASK}@h.example/mcp#{MASK}"
    assert with_secrets_kept(shown, stored) == stored


def test_a_key_in_a_url_s_path_is_masked() -> None:
    """QA (MEDIUM): servers such as Zapier's put their key in the URL's path
    (``/api/mcp/s/<key>/mcp``); an HTTP error quoting the URL showed it to the user and
    the model, and the admin showed it to staff. Words, names and short ids stay."""
    import httpx

    from forge.tools.mcp.connection import reason as _reason
    from forge.tools.mcp.spec import with_secrets_kept

    key = "zK3p9QvX2mN8rT5wL1yB7cF4hJ6dG0sA"
    url = f"https://mcp.zapier.example/api/mcp/s/{key}/mcp"
    request = httpx.Request("POST", url)
    error = httpx.HTTPStatusError(
        "Client error '404 Not Found' for url " + repr(url),
        request=request,
        response=httpx.Response(404, request=request),
    )
    reason = _reason(ExceptionGroup("failed", [error]))
    assert key not in reason
    assert "mcp.zapier.example/api/mcp/s/" in reason  # which server, still
    stored = {"zapier": {"url": url}}
    shown = redacted(stored)
    assert shown["zapier"]["url"] == f"https://mcp.zapier.example/api/mcp/s/{MASK}/mcp"
    assert redacted(shown) == shown  # masking is idempotent
    assert with_secrets_kept(shown, stored) == stored
    plain = "https://a-very-long-hostname-with-digits-123.example/mcp-server-streamable-http/v2"
    assert redacted({"p": {"url": plain}})["p"]["url"] == plain


def test_changing_one_arg_keeps_the_other_args_secrets() -> None:
    args = [
        "run",
        "-e",
        f"GITHUB_TOKEN={SECRET}",
        "--header",
        f"Authorization: Bearer {SECRET}2",
        "postgresql://u:" + SECRET + "3@db/p",
        "image:1",
    ]
    stored = {"s": {"command": "docker", "args": args}}
    shown = redacted(stored)
    assert SECRET not in json.dumps(shown)
    edited = json.loads(json.dumps(shown))
    edited["s"]["args"][-1] = "image:2"  # one arg changed
    edited["s"]["args"].insert(1, "--rm")  # one added: the others move
    kept = with_secrets_kept(edited, stored)["s"]["args"]
    assert kept == ["run", "--rm", *args[1:-1], "image:2"]
    edited["s"]["args"][3] = "GITHUB_TOKEN=new"  # a secret retyped
    assert with_secrets_kept(edited, stored)["s"]["args"][3] == "GITHUB_TOKEN=new"


@pytest.mark.django_db
def test_a_mask_that_matches_no_stored_secret_is_refused() -> None:
    """A masked value moved or renamed beyond recognition would be saved as the mask
    itself: the admin says so instead."""
    from forge.admin import AgentForm
    from forge.models import Agent

    agent = Agent(name="a", pk=1, mcp_servers={"s": {"command": "x", "args": ["-k", SECRET]}})
    form = AgentForm(
        data={
            "name": "a",
            "step_limit": 10,
            "mcp_servers": json.dumps({"s": {"command": "x", "args": [f"K={MASK}"]}}),
        },
        instance=agent,
    )
    assert not form.is_valid()
    assert "masked" in str(form.errors["mcp_servers"])


@pytest.mark.django_db
def test_the_admin_keeps_args_secrets_when_saved_unchanged_or_one_arg_changed(admin_client):
    from forge.models import Agent

    servers: dict[str, Any] = {
        "pg": {
            "command": "npx",
            "args": [
                "-y",
                "@modelcontextprotocol/server-postgres",
                f"postgresql://a:{SECRET}@db/p",
            ],
        },
        "remote": {
            "command": "npx",
            "args": ["mcp-remote", "https://x/mcp", "--header", f"Authorization: Bearer {SECRET}"],
        },
        "gh": {"command": "docker", "args": ["run", "-e", f"GH_TOKEN={SECRET}", "gh:1"]},
        "h": {"url": f"https://h.example/mcp#token={SECRET}"},
    }
    agent = Agent.objects.create(name="argy", mcp_servers=servers)
    url = reverse("admin:forge_agent_change", args=[agent.pk])
    page = admin_client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.text
    form = page.context["adminform"].form
    shown = json.loads(form["mcp_servers"].value())
    response = admin_client.post(
        url, {"name": "argy", "step_limit": 10, "mcp_servers": json.dumps(shown)}
    )
    assert response.status_code == 302, response.content[:2000]
    agent.refresh_from_db()
    assert agent.mcp_servers == servers  # saved unchanged: every secret kept
    shown["gh"]["args"][-1] = "gh:2"
    response = admin_client.post(
        url, {"name": "argy", "step_limit": 10, "mcp_servers": json.dumps(shown)}
    )
    assert response.status_code == 302, response.content[:2000]
    agent.refresh_from_db()
    assert agent.mcp_servers == {
        **servers,
        "gh": {**servers["gh"], "args": [*servers["gh"]["args"][:-1], "gh:2"]},
    }


@pytest.mark.timeout(30)
def test_masking_a_long_error_takes_time_linear_in_it() -> None:
    """QA: an MCP tool's ``isError`` text is masked on the turn's event loop; the URL rule
    read each run of letters to its end from every start, and 100 KB took 26 s (3 MB,
    hours) with every session of the process waiting."""
    import time

    from forge.tools.mcp.spec import masked_text, parse_server

    spec = parse_server("s", {"command": "x", "env": {"TOKEN": f"{SECRET}1"}})
    text = "Error executing tool: " + "e" * 1_000_000 + f" https://u:{SECRET}1@h.example/p?k=v"
    began = time.monotonic()
    masked = masked_text(text, spec)
    assert time.monotonic() - began < 5
    assert masked.endswith(f" https://{MASK}@h.example/p?{MASK}")
    assert masked_text("x" * 40 + "https://u:pw@h.example/", spec).endswith(f"://{MASK}@h.example/")


def test_a_failure_reason_that_quotes_a_secret_of_the_spec_masks_it() -> None:
    """An error may quote the command line, a header or an env value: the reason shown in
    notices, the model's input and the log masks what the admin masks."""
    from forge.tools.mcp.connection import reason as _reason
    from forge.tools.mcp.spec import parse_server

    spec = parse_server(
        "s",
        {
            "command": "npx",
            "args": ["mcp-remote", "--header", f"Authorization: Bearer {SECRET}1", "-k", "kk"],
            "env": {"DB": f"{SECRET}2"},
        },
    )
    error = RuntimeError(
        f"spawn failed: npx mcp-remote --header 'Authorization: Bearer {SECRET}1' (env "
        f"DB={SECRET}2) token {SECRET}1"
    )
    reason = _reason(ExceptionGroup("failed", [error]), spec)
    assert SECRET not in reason
    assert reason.startswith("RuntimeError: spawn failed: npx mcp-remote --header")


@pytest.mark.parametrize(
    ("raw", "text", "secrets"),
    [
        (
            {"command": "npx", "args": ["-H", "X-Api-Key:abc123def"]},
            "server said: bad key abc123def",
            ["abc123def"],
        ),
        (
            {"command": "npx", "args": ["--header=X-Api-Key:abc123def"]},
            "server said: bad key abc123def",
            ["abc123def"],
        ),
        (
            {"command": "npx", "args": ["https://u:pw12345@h/x?key=SECRET999"]},
            "auth failed for pw12345 / SECRET999",
            ["pw12345", "SECRET999"],
        ),
        (
            {"command": "npx", "args": ["--url", "https://h/x?key=SECRET999&b=1"]},
            "bad key=SECRET999",
            ["SECRET999"],
        ),
        (
            {"command": "npx", "args": ["--db=postgresql://app:pw12345@db/p#tok=FRAG9999"]},
            "password pw12345 refused, fragment FRAG9999",
            ["pw12345", "FRAG9999"],
        ),
        (
            {"command": "npx", "args": ["--header", "Authorization:Bearer zzzz9999"]},
            "invalid bearer zzzz9999",
            ["zzzz9999"],
        ),
        (
            {"url": "https://user:pw12345@h/mcp?api_key=SECRET999"},
            "401: invalid api_key SECRET999 for user pw12345",
            ["pw12345", "SECRET999"],
        ),
    ],
)
def test_a_failure_reason_masks_every_part_of_a_spec_s_secrets(
    raw: dict[str, Any], text: str, secrets: list[str]
) -> None:
    """A header without a space, a URL's password or one query value quoted alone, the
    spec's own URL: each is a secret of the spec, masked where an error quotes it."""
    from forge.tools.mcp.spec import masked_text, parse_server

    shown = masked_text(text, parse_server("s", raw))
    for secret in secrets:
        assert secret not in shown, shown
    assert MASK in shown


def test_a_failure_reason_leaves_short_common_strings() -> None:
    from forge.tools.mcp.spec import masked_text, parse_server

    spec = parse_server("s", {"url": "https://h/mcp?a=1&key=SECRET999"})
    assert masked_text("a 1 b", spec) == "a 1 b"


def test_an_ambiguous_mask_of_a_repeated_option_is_not_restored() -> None:
    """Two ``--api-key`` options, the first pair deleted: which secret the mask left
    stands for is not known, so it stays a mask (the admin refuses it)."""
    from forge.tools.mcp.spec import has_mask

    stored = {"s": {"command": "x", "args": ["--api-key", "K1", "--api-key", "K2"]}}
    edited = {"s": {"command": "x", "args": ["--api-key", MASK]}}
    kept = with_secrets_kept(edited, stored)
    assert kept["s"]["args"] != ["--api-key", "K1"]
    assert has_mask(kept)
    # unedited, every secret is restored
    assert with_secrets_kept(redacted(stored), stored) == stored


def test_a_mask_whose_option_was_removed_is_not_restored() -> None:
    """``--api-key`` removed, its masked value left: put back, the secret would be a
    positional argument, shown in clear from then on."""
    from forge.tools.mcp.spec import has_mask, masked_args

    stored = {"s": {"command": "x", "args": ["--api-key", "K1secret"]}}
    kept = with_secrets_kept({"s": {"command": "x", "args": [MASK]}}, stored)
    assert "K1secret" not in json.dumps(kept)
    assert has_mask(kept)
    stored = {"s": {"command": "x", "args": ["run", "--api-key", "K1secret", "img"]}}
    edited = {"s": {"command": "x", "args": ["run", MASK, "img"]}}
    kept = with_secrets_kept(edited, stored)
    assert "K1secret" not in json.dumps(kept)
    assert masked_args(kept["s"]["args"]) == edited["s"]["args"]


@pytest.mark.django_db
def test_the_admin_asks_to_retype_an_ambiguous_masked_secret() -> None:
    from forge.admin import AgentForm
    from forge.models import Agent

    args = ["--api-key", "K1", "--api-key", "K2"]
    agent = Agent(name="a", pk=1, mcp_servers={"s": {"command": "x", "args": args}})
    form = AgentForm(
        data={
            "name": "a",
            "step_limit": 10,
            "mcp_servers": json.dumps({"s": {"command": "x", "args": ["--api-key", MASK]}}),
        },
        instance=agent,
    )
    assert not form.is_valid()
    message = str(form.errors["mcp_servers"])
    assert "masked" in message
    assert "secret, typed again" in message


# A sixth-round finding: a secret word *inside* an option's or a variable's name masked a
# harmless value (``--max-tokens 4096``, ``--author alice``, ``--passthrough x``), in the
# masked view every tenant's staff see. A name names a secret by its parts now.
@pytest.mark.parametrize(
    "args",
    [
        ["--max-tokens", "4096"],
        ["--max-tokens=4096"],
        ["--author", "alice"],
        ["--passthrough", "x"],
        ["--token-limit", "100"],
        ["--api-key-file", "/run/secrets/key"],
        ["--password-stdin", "serve"],
        ["--secret-name", "prod-db"],
        ["--bypass", "proxy"],
        ["MAX_TOKENS=4096", "KEYBOARD=us", "AUTHOR=alice", "TOKEN_LIMIT=100"],
        ["-e", "MAX_TOKENS=4096", "--env=PASSTHROUGH=1"],
        ["X-Token-Limit: 100", "Author: alice"],
    ],
)
def test_a_name_that_merely_contains_a_secret_word_is_not_masked(args: list[str]) -> None:
    from forge.tools.mcp.spec import masked_args

    assert masked_args(args) == args


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["--pw", SECRET, "--jwt", SECRET], ["--pw", MASK, "--jwt", MASK]),
        (["--passwd", SECRET, f"--pass={SECRET}"], ["--passwd", MASK, f"--pass={MASK}"]),
        (["--auth", SECRET, "--bearer", SECRET], ["--auth", MASK, "--bearer", MASK]),
        (["--apikey", SECRET, "--apiKey", SECRET], ["--apikey", MASK, "--apiKey", MASK]),
        (
            ["--access-token", SECRET, "--auth-token", SECRET, "--private-key", SECRET],
            ["--access-token", MASK, "--auth-token", MASK, "--private-key", MASK],
        ),
        (
            ["--credentials", SECRET, "--credential", SECRET],
            ["--credentials", MASK, "--credential", MASK],
        ),
        (
            ["--auth-header", SECRET, "--passphrase", SECRET],
            ["--auth-header", MASK, "--passphrase", MASK],
        ),
        (["--aws-secret-access-key", SECRET], ["--aws-secret-access-key", MASK]),
        (
            [f"API_TOKEN={SECRET}", f"PGPASSWORD={SECRET}", f"MYSQL_PWD={SECRET}"],
            [f"API_TOKEN={MASK}", f"PGPASSWORD={MASK}", f"MYSQL_PWD={MASK}"],
        ),
        (
            ["-e", f"GITHUB_PERSONAL_ACCESS_TOKEN={SECRET}", f"--env=OPENAI_API_KEY={SECRET}"],
            ["-e", f"GITHUB_PERSONAL_ACCESS_TOKEN={MASK}", f"--env=OPENAI_API_KEY={MASK}"],
        ),
        (
            [f"X-Auth-Token: {SECRET}", f"Proxy-Authorization: {SECRET}"],
            [f"X-Auth-Token: {MASK}", f"Proxy-Authorization: {MASK}"],
        ),
    ],
)
def test_a_name_whose_part_is_a_secret_word_is_masked(args: list[str], shown: list[str]) -> None:
    stored = {"s": {"command": "npx", "args": args}}
    out = redacted(stored)
    assert out["s"]["args"] == shown
    assert with_secrets_kept(json.loads(json.dumps(out)), stored) == stored


JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl"


# The same round: secrets a name does not announce were shown in clear.
@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (
            ["Server=db;User Id=app;Password=hunter2-x;Database=d"],
            [f"Server=db;User Id=app;Password={MASK};Database=d"],
        ),
        (["Server=db;Password=my secret pw;"], [f"Server=db;Password={MASK};"]),
        (
            ["--dsn", "host=db user=app password=hunter2-x dbname=d"],
            ["--dsn", f"host=db user=app password={MASK} dbname=d"],
        ),
        (
            ["--dsn=host=db password='two words' sslmode=require"],
            [f"--dsn=host=db password='{MASK}' sslmode=require"],
        ),
        (["serve", JWT], ["serve", MASK]),
        ([f"--claims=x;{JWT}"], [f"--claims=x;{MASK}"]),
        (["--key-id", "AKIAIOSFODNN7EXAMPLE"], ["--key-id", MASK]),
        (["ASIAIOSFODNN7EXAMPLE"], [MASK]),
        (
            ["--aws-secret-access-key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"],
            ["--aws-secret-access-key", MASK],
        ),
        (
            ["admin:hunter2@db.example.com:5432", "--db=app:pw-9x@10.0.0.5/prod"],
            [f"admin:{MASK}@db.example.com:5432", f"--db=app:{MASK}@10.0.0.5/prod"],
        ),
        (["u:pw-9x@db:5432"], [f"u:{MASK}@db:5432"]),
        (["-c", "main(token='abc123', port=8080)"], ["-c", f"main(token='{MASK}', port=8080)"]),
    ],
)
def test_secrets_no_name_announces_are_masked(args: list[str], shown: list[str]) -> None:
    from forge.tools.mcp.spec import masked_args

    stored = {"s": {"command": "npx", "args": args}}
    out = redacted(stored)
    assert out["s"]["args"] == shown
    assert masked_args(shown) == shown  # a shown form masks to itself
    assert with_secrets_kept(json.loads(json.dumps(out)), stored) == stored


@pytest.mark.parametrize(
    "args",
    [
        ["alpine:3.19@sha256:0123456789abcdef0123456789abcdef"],
        ["npm:lodash@4.17.21", "npm:pkg@latest"],
        ["git@github.com:org/repo.git"],
        ["Server=db;Database=d;Trusted_Connection=yes"],
        ["host=db user=app dbname=d"],
        ["AKIA-not-a-key", "eyJhbGciOi-only-one-part"],
    ],
)
def test_look_alikes_of_those_secrets_are_not_masked(args: list[str]) -> None:
    from forge.tools.mcp.spec import masked_args

    assert masked_args(args) == args


@pytest.mark.parametrize(
    ("args", "text", "secrets"),
    [
        (["Server=db;Password=hunter2-x;"], "login failed: password hunter2-x", ["hunter2-x"]),
        (["host=db password='two words'"], "bad password 'two words'", ["two words"]),
        (["host=db password='two words'"], "bad password two words", ["two words"]),
        (["Driver=x;PWD={se;cret};"], "PWD se;cret refused", ["se;cret"]),
        (["admin:hunter2@db.example.com"], "auth hunter2 refused", ["hunter2"]),
        (["--pw", "pw-12345"], "bad pw pw-12345", ["pw-12345"]),
        ([], f"bad token {JWT} for AKIAIOSFODNN7EXAMPLE", [JWT, "AKIAIOSFODNN7EXAMPLE"]),
    ],
)
def test_a_failure_reason_masks_those_secrets_too(
    args: list[str], text: str, secrets: list[str]
) -> None:
    from forge.tools.mcp.spec import masked_text, parse_server

    shown = masked_text(text, parse_server("s", {"command": "npx", "args": args}))
    for secret in secrets:
        assert secret not in shown, shown
    assert MASK in shown
