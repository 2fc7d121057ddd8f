"""Which pages may open a socket: the Origin check of the WebSocket handshake.

A browser sends the session cookie with any socket a page opens, whatever site the
page came from; the Origin header is what tells a foreign page apart. Channels'
``AllowedHostsOriginValidator`` compares only the Origin's host with
``ALLOWED_HOSTS``, so another web application on the same host, on another port
(``http://localhost:9999`` beside Forge on 8000), could open a socket with the user's
cookie and read their sessions. :class:`SameOriginValidator` adds the port:

* the Origin's host must be in ``ALLOWED_HOSTS`` (as before);
* when the handshake's ``Host`` header names a port (``127.0.0.1:8000``), the Origin
  must name the same one (its explicit port, or its scheme's default);
* a ``Host`` without a port (a proxy on 80 or 443 passing ``$http_host``; the browser
  omits a default port from both) means the page's default port: the Origin must name
  none, or its scheme's default (``https://forge.example:8443``, another application
  on that host, was let in), and, when the connection is known to be secure (``wss``,
  or ``SECURE_PROXY_SSL_HEADER`` says so) or known not to be (that header configured
  and saying otherwise), the Origin's scheme must agree (a plain-http page on the
  same host opened a socket that carried the ``Secure`` cookie);
* an Origin listed in ``CSRF_TRUSTED_ORIGINS`` (exactly, scheme and port included) is
  accepted whatever the port: a front end served from elsewhere, as Django's CSRF
  check accepts it for the HTTP API.

A refused handshake is closed before it is accepted (403 to the browser), as Channels
refuses a host outside ``ALLOWED_HOSTS``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import AllowedHostsOriginValidator, WebsocketDenier
from django.conf import settings

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            try:
                return str(value.decode("latin-1"))
            except UnicodeDecodeError:  # pragma: no cover (latin-1 decodes any byte)
                return None
    return None


def _port_of_host(host: str) -> int | None:
    """The port a ``Host`` header names, or None (none named, or not a number)."""
    if host.startswith("["):  # [::1]:8000
        _, _, rest = host.partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        _, _, port = host.rpartition(":") if ":" in host else ("", "", "")
    return int(port) if port.isascii() and port.isdigit() else None


def same_port(origin: str, host: str, *, secure: bool | None = None) -> bool:
    """Whether ``origin`` names the port the ``Host`` header does, or, for a header
    without one, its scheme's default port (and the scheme ``secure`` says, when known:
    the module's docstring)."""
    wanted = _port_of_host(host)
    try:
        parts = urlsplit(origin)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port out of range or not a number
        return False
    if wanted is not None:
        return port == wanted
    if port is None or port != DEFAULT_PORTS.get(parts.scheme):
        return False
    return secure is None or (parts.scheme == "https") == secure


def is_secure(scope: dict[str, Any]) -> bool | None:
    """Whether the handshake came over TLS: ``wss``, or what ``SECURE_PROXY_SSL_HEADER``
    says a proxy in front did; None when nothing tells (no such header configured)."""
    if scope.get("scheme") == "wss":
        return True
    configured = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not configured:
        return None
    meta_name, expected = configured
    name = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")
    value = _header(scope, name)
    return value is not None and value.split(",")[0].strip() == expected


class SameOriginValidator:
    """``AllowedHostsOriginValidator`` and the port (the module docstring)."""

    def __init__(self, application: Any) -> None:
        self.application = application
        self.hosts = AllowedHostsOriginValidator(application)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origin, host = _header(scope, b"origin"), _header(scope, b"host")
        trusted = origin is not None and origin in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])
        if (
            origin is not None
            and host is not None
            and not trusted
            and not same_port(origin, host, secure=is_secure(scope))
        ):
            return await WebsocketDenier()(scope, receive, send)
        return await self.hosts(scope, receive, send)
