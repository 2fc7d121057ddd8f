"""MCP server specs: the ``mcpServers`` JSON shape other MCP clients use, checked.

``{"<server>": {"command": str, "args"?: [str], "env"?: {str: str}}}`` is a stdio
server; ``{"<server>": {"url": "http(s)://…", "headers"?: {str: str}}}`` a
streamable HTTP one. A server's tools are named ``<server>_<tool>``, so a server
name is ``[A-Za-z0-9-]`` (no ``_``: the first ``_`` of a tool name ends the
server's name) of at most 32 characters.

Env values and header values are secrets (tokens, keys), and so are the secrets an
argument list or a URL carries (:func:`.masking.masked_args`,
:func:`.masking.masked_urls`; the rule is in docs/mcp.md): :func:`redacted` is the only
form of a spec that may be shown (admin read views, logs, the API), :func:`masked_text`
the form of an error's message.
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .masking import MASK, URL, masked_anywhere, masked_args, masked_urls

SERVER_NAME = re.compile(r"[A-Za-z0-9-]{1,32}")


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


def _args_kept(new: list[Any], old: list[Any]) -> list[Any]:
    """``new`` with every argument that reads as the stored one was shown put back: the
    two lists are aligned (difflib), so an argument added, removed or changed elsewhere
    does not lose the others' secrets.

    Safe over convenient, a mask is left (and :func:`has_mask` refuses it) rather than
    put back when what it stands for is not sure: in an edited list, a masked argument
    whose shown form (with the shown argument before it) stands for different stored
    values (``--api-key K1 --api-key K2``, one pair deleted); and any argument whose
    mask means another thing once put back (``--api-key`` deleted before its value: the
    secret would become a positional argument, shown in clear)."""
    if not all(isinstance(a, str) for a in [*new, *old]):
        return new
    shown = masked_args(old)
    stands_for: dict[tuple[str, str], set[str]] = {}
    for i, (arg, form) in enumerate(zip(old, shown, strict=True)):
        stands_for.setdefault((shown[i - 1] if i else "", form), set()).add(arg)
    edited = new != shown
    kept = list(new)
    restored: list[int] = []
    matcher = difflib.SequenceMatcher(None, shown, new, autojunk=False)
    for tag, i1, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            continue
        for k in range(j2 - j1):
            i, j = i1 + k, j1 + k
            if old[i] == shown[i]:
                continue  # nothing masked: the same either way
            if edited and len(stands_for[(shown[i - 1] if i else "", shown[i])]) > 1:
                continue  # ambiguous: which stored secret is not known
            kept[j] = old[i]
            restored.append(j)
    while restored:  # each put back argument must show as it was submitted
        again = masked_args(kept)
        changed = [j for j in restored if again[j] != new[j]]
        if not changed:
            break
        for j in changed:
            kept[j] = new[j]
            restored.remove(j)
    return kept


def _masked_spans(arg: str, shown: str) -> list[str]:
    """The parts of ``arg`` that its shown form ``shown`` masks: each mask a span. The
    shown form is ``arg`` with spans replaced by masks, a header's colon followed by one
    space; read as a pattern, else aligned character by character (difflib)."""
    parts = [re.escape(part) for part in shown.split(MASK)]
    pattern = "(.+?)".join(parts).replace(":\\ ", ":[ \\t]*")
    match = re.fullmatch(pattern, arg, re.DOTALL)
    if match is not None:
        return list(match.groups())
    matcher = difflib.SequenceMatcher(None, arg, shown, autojunk=False)
    return [arg[i1:i2] for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal"]


def _secret_parts(secret: str) -> list[str]:
    """``secret`` and its parts an error may quote alone: the credentials after a scheme
    (``Bearer …``, ``Basic …``), and of every URL in it the user and the password, each
    value of its query and fragment (and ``name=value``)."""
    found = [secret]
    scheme, space, credentials = secret.partition(" ")
    if space and scheme.isalpha():
        found.append(credentials)
    for match in URL.finditer(secret):
        if match["userinfo"]:
            userinfo = match["userinfo"][:-1]
            found.append(userinfo)
            found.extend(userinfo.split(":", 1))
        for part in (match["query"], match["fragment"]):
            if part:
                found.append(part[1:])
                for pair in re.split(r"[&;]", part[1:]):
                    found.append(pair)
                    found.append(pair.partition("=")[2])
    found.extend([urllib.parse.unquote(s) for s in found])
    return found


def _secrets(spec: ServerSpec) -> list[str]:
    """The literal secrets of ``spec``, longest first: env and header values, what
    :func:`masked_args` masks in its arguments (each masked span, and the whole argument)
    and :func:`masked_urls` in its URL, each with its parts (:func:`_secret_parts`).
    Shorter than four characters, a value is left (it would mask common strings)."""
    found = [value for _, value in (*spec.env, *spec.headers)]
    pairs = list(zip(spec.args, masked_args(list(spec.args)), strict=True))
    if spec.url:
        pairs.append((spec.url, masked_urls(spec.url)))
    for arg, shown in pairs:
        if arg == shown:
            continue
        for span in _masked_spans(arg, shown):
            found.extend(_secret_parts(span))
        found.extend(_secret_parts(arg))
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def masked_text(text: str, spec: ServerSpec | None = None) -> str:
    """``text`` (an error's message) with the secrets of ``spec`` and every URL's
    (:func:`masked_urls`) masked: a failure reason that quotes the command line, a
    header or an env value must not show it to users, the model or the logs."""
    for secret in _secrets(spec) if spec is not None else ():
        text = text.replace(secret, MASK)
    return masked_anywhere(text)


def has_mask(raw: Any) -> bool:
    """Whether a mask is left anywhere in ``raw`` (a redacted value edited so that a mask
    matches no stored secret, or not surely one: saved, it would replace the secret by
    the mask)."""
    if isinstance(raw, str):
        return MASK in raw
    if isinstance(raw, dict):
        return any(has_mask(v) for v in raw.values())
    if isinstance(raw, list):
        return any(has_mask(v) for v in raw)
    return False


def redacted(raw: Any) -> Any:
    """The ``mcpServers`` value with every env value and header value masked, every secret
    of the argument list (:func:`masked_args`), and the user information, query and
    fragment of the URL (for showing; anything not of the shape is
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
    """``new`` (an edit of a redacted value) with every masked env/header value, a URL left
    as it was shown, and every argument left as it was shown (:func:`_args_kept`), put
    back from ``old``: an admin edits a server without retyping its secrets. A mask that
    matches nothing stored stays a mask (:func:`has_mask` finds it)."""
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
            if isinstance(args, list) and isinstance(kept, list):
                spec["args"] = _args_kept(args, kept)  # each argument left as shown: kept
        result[name] = spec
    return result
