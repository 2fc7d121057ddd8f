"""MCP server specs: the ``mcpServers`` JSON shape other MCP clients use, checked.

``{"<server>": {"command": str, "args"?: [str], "env"?: {str: str}}}`` is a stdio
server; ``{"<server>": {"url": "http(s)://…", "headers"?: {str: str}}}`` a
streamable HTTP one. A server's tools are named ``<server>_<tool>``, so a server
name is ``[A-Za-z0-9-]`` (no ``_``: the first ``_`` of a tool name ends the
server's name) of at most 32 characters.

Env values and header values are secrets (tokens, keys): :func:`redacted` is the
only form of a spec that may be shown (admin read views, logs, the API).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SERVER_NAME = re.compile(r"[A-Za-z0-9-]{1,32}")
MASK = "••••••"


class McpSpecError(ValueError):
    """An ``mcpServers`` value that is not one: the message says where and why."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    command: str = ""  # stdio
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""  # streamable HTTP
    headers: tuple[tuple[str, str], ...] = field(default=())

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


def _strings(name: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpSpecError(f"MCP server {name!r}: {key} must be a list of strings")
    return tuple(value)


def _pairs(name: str, key: str, value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise McpSpecError(f"MCP server {name!r}: {key} must be an object of strings")
    return tuple(sorted(value.items()))


def parse_server(name: Any, raw: Any) -> ServerSpec:
    if not isinstance(name, str) or SERVER_NAME.fullmatch(name) is None:
        raise McpSpecError(
            f"MCP server name {name!r}: use 1-32 letters, digits or '-' (tools are "
            "named <server>_<tool>)"
        )
    if not isinstance(raw, dict):
        raise McpSpecError(f"MCP server {name!r}: must be an object")
    has_command, has_url = "command" in raw, "url" in raw
    if has_command == has_url:
        raise McpSpecError(f"MCP server {name!r}: give either command (stdio) or url (HTTP)")
    allowed = {"command", "args", "env"} if has_command else {"url", "headers"}
    extra = sorted(set(raw) - allowed)
    if extra:
        raise McpSpecError(f"MCP server {name!r}: unknown keys {', '.join(extra)}")
    if has_command:
        command = raw["command"]
        if not isinstance(command, str) or not command.strip():
            raise McpSpecError(f"MCP server {name!r}: command must be a non-empty string")
        return ServerSpec(
            name=name,
            command=command,
            args=_strings(name, "args", raw.get("args", [])),
            env=_pairs(name, "env", raw.get("env", {})),
        )
    url = raw["url"]
    if not isinstance(url, str) or not re.match(r"https?://[^\s/]+", url):
        raise McpSpecError(f"MCP server {name!r}: url must be an http(s) URL")
    return ServerSpec(name=name, url=url, headers=_pairs(name, "headers", raw.get("headers", {})))


def parse_servers(raw: Any) -> dict[str, ServerSpec]:
    """Every server of an ``mcpServers`` object, checked; :class:`McpSpecError` on the
    first bad one."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise McpSpecError("MCP servers must be a JSON object {name: spec}")
    return {name: parse_server(name, spec) for name, spec in raw.items()}


def merged(base: Mapping[str, Any] | None, own: Mapping[str, Any] | None) -> dict[str, Any]:
    """An agent's servers: the deployment's (``FORGE_MCP_SERVERS``), then its own, which
    replace a deployment server of the same name."""
    return {**dict(base or {}), **dict(own or {})}


_URL = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]*@)?"
    r"(?P<rest>[^\s'\"?#]*)(?P<query>\?[^\s'\"#]*)?"
)


def masked_urls(text: str) -> str:
    """``text`` with every URL's user information and query masked: where an MCP server's
    URL carries a key (``?api_key=…``, ``https://user:pass@…``), an error that quotes the
    URL (httpx's do) must not show it to users, the model or the logs."""

    def mask(match: re.Match[str]) -> str:
        userinfo = f"{MASK}@" if match["userinfo"] else ""
        query = f"?{MASK}" if match["query"] else ""
        return f"{match['scheme']}{userinfo}{match['rest']}{query}"

    return _URL.sub(mask, text)


# A command-line option that names a secret: its value is masked where it is shown.
_SECRET_OPTION = re.compile(
    r"-{1,2}[\w-]*(token|key|secret|password|passwd|auth|credential)[\w-]*", re.IGNORECASE
)


def masked_args(args: list[Any]) -> list[Any]:
    """``args`` with the value of every option that names a secret masked: the argument
    after ``--api-key`` or ``-token``, and the part after ``=`` of ``--password=…``
    (a server's command line often carries its key)."""
    shown: list[Any] = []
    after_option = False
    for arg in args:
        if not isinstance(arg, str):
            shown.append(arg)
            after_option = False
            continue
        option, equals, _value = arg.partition("=")
        if after_option and not arg.startswith("-"):
            shown.append(MASK)
        elif equals and _SECRET_OPTION.fullmatch(option):
            shown.append(f"{option}={MASK}")
        else:
            shown.append(arg)
        after_option = not equals and _SECRET_OPTION.fullmatch(arg) is not None
    return shown


def redacted(raw: Any) -> Any:
    """The ``mcpServers`` value with every env value and header value masked, the value of
    every command-line option that names a secret (:func:`masked_args`), and the user
    information and query of every URL (for showing; anything not of the shape is
    returned as is)."""
    if not isinstance(raw, dict):
        return raw
    shown: dict[str, Any] = {}
    for name, spec in raw.items():
        if isinstance(spec, dict):
            spec = dict(spec)
            for key in ("env", "headers"):
                if isinstance(spec.get(key), dict):
                    spec[key] = dict.fromkeys(spec[key], MASK)
            if isinstance(spec.get("url"), str):
                spec["url"] = masked_urls(spec["url"])
            if isinstance(spec.get("args"), list):
                spec["args"] = masked_args(spec["args"])
        shown[name] = spec
    return shown


def with_secrets_kept(new: Any, old: Any) -> Any:
    """``new`` (an edit of a redacted value) with every masked env/header value, and a URL
    or argument list left as it was shown, put back from ``old``: an admin edits a server
    without retyping its secrets."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    result: dict[str, Any] = {}
    for name, spec in new.items():
        before = old.get(name)
        if isinstance(spec, dict) and isinstance(before, dict):
            spec = dict(spec)
            for key in ("env", "headers"):
                values, previous = spec.get(key), before.get(key)
                if isinstance(values, dict) and isinstance(previous, dict):
                    spec[key] = {
                        k: previous.get(k, v) if v == MASK else v for k, v in values.items()
                    }
            url, stored = spec.get("url"), before.get("url")
            if isinstance(url, str) and isinstance(stored, str) and url == masked_urls(stored):
                spec["url"] = stored  # shown masked, left as it was
            args, kept = spec.get("args"), before.get("args")
            if isinstance(args, list) and isinstance(kept, list) and args == masked_args(kept):
                spec["args"] = kept  # shown masked, left as it was
        result[name] = spec
    return result
