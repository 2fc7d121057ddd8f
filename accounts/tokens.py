"""API tokens as people see them: a key is shown once, when it is made, and never again.

A DRF token's key is its primary key and its ``str()``. Django's admin writes a
model's ``str()`` into page titles, breadcrumbs, delete confirmations (including
the list of what deleting a user takes with it), success messages and the
``LogEntry`` of every action; with DRF's own ``str()`` every one of them would
hold the full key. So Forge makes a token's ``str()`` its prefix (``hide_keys``,
called once from ``AccountsConfig.ready``): the first ``SHOWN`` characters and
an ellipsis, as GitHub and Stripe show theirs. The first 6 of 40 hex characters
leave 136 bits unknown, enough to tell one's tokens apart and useless to guess
the rest. Code that needs the key reads ``token.key``; nothing in Forge or DRF
uses ``str()`` for it.
"""

from __future__ import annotations

from rest_framework.authtoken.models import Token

SHOWN = 6
ELLIPSIS = "\u2026"


def prefix(key: str | None) -> str:
    """How a key is shown after its creation: ``"3f9a2c…"``."""
    return f"{key[:SHOWN]}{ELLIPSIS}" if key else ""


def _token_str(token: Token) -> str:
    return prefix(token.key)


def hide_keys() -> None:
    """Make every token's ``str()`` its prefix (DRF's ``Token`` and its ``TokenProxy``)."""
    Token.__str__ = _token_str  # type: ignore[method-assign,assignment]
