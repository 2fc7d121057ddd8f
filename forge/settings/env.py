"""Small helpers for reading the environment in settings modules."""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_networks(name: str) -> list[str]:
    """A comma-separated list of IP addresses or networks (``127.0.0.1,10.0.0.0/8``),
    each checked now so that a typo stops the process at start, not at the first use."""
    import ipaddress

    items = env_list(name, [])
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP address or network (e.g. 10.0.0.0/8)"
            ) from exc
    return items


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}") from exc


def env_json_object(name: str) -> dict[str, Any]:
    """A JSON object (``{}`` when unset or blank); anything else is refused at start-up.
    The error never quotes the value: it may hold secrets (MCP server env, headers)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a JSON object: {exc.args[0][:80]}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


def env_json(name: str, default: Any) -> Any:
    """A JSON value (an object or a list); ``default`` when unset or blank."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON, got {raw[:80]!r}") from exc
    if not isinstance(value, dict | list):
        raise ImproperlyConfigured(f"{name} must be a JSON object or list, got {raw[:80]!r}")
    return value
