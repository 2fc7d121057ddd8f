"""The root of every error Forge raises on purpose, and the accounts' own.

``ForgeError`` lives at the bottom layer so that every store and every face can
raise and catch it. Each subclass names what went wrong with a stable ``code``
(the wire's ``error.code``) and the HTTP ``status`` it means; the faces
translate any ``ForgeError`` in one place (``forge.api.errors`` for HTTP, an
error frame on the socket) and never by hand.
"""

from __future__ import annotations


class ForgeError(Exception):
    code = "error"
    status = 400  # the request was bad, unless a subclass says otherwise

    @property
    def extra(self) -> dict[str, object]:
        """What the error's body (or frame) says beyond its code and message."""
        return {}


class NoTenant(ForgeError, LookupError):
    """The user belongs to no tenant, so has nothing to act on."""

    code = "no_tenant"
    status = 403
