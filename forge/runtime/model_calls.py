"""What one model call costs, and the bounded labels its metrics carry."""

from __future__ import annotations

import re

from django.conf import settings

from forge.providers import events as ev
from sessions.shapes import MAX_COST


def price(model: str, usage: ev.Usage) -> float:
    """Cost in dollars of a step, from ``FORGE_MODEL_PRICES`` (per million tokens).

    Input tokens include cached ones, billed at the cache-read price; output
    tokens include reasoning.
    """
    table = settings.FORGE_MODEL_PRICES.get(model, {})
    uncached = max(usage.input - usage.cache_read, 0)
    cost = (
        uncached * table.get("input", 0.0)
        + usage.cache_read * table.get("cache_read", table.get("input", 0.0))
        + usage.cache_write * table.get("cache_write", 0.0)
        + usage.output * table.get("output", 0.0)
    )
    return min(round(cost / 1_000_000, 10), MAX_COST)  # what one event may log


def provider_of(model: str) -> str:
    return model.split("/", 1)[0]


_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def failure_kind(message: str) -> str:
    """A bounded label for a provider failure: ``http_<status>``, ``timeout``,
    ``connection``, ``overflow`` or ``other``."""
    found = _HTTP_STATUS.search(message)
    if found:
        return f"http_{found.group(1)}"
    lowered = message.lower()
    for word, kind in (
        ("timed out", "timeout"),
        ("timeout", "timeout"),
        ("connect", "connection"),
        ("context", "overflow"),
    ):
        if word in lowered:
            return kind
    return "other"
