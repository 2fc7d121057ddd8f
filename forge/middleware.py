"""The Content-Security-Policy response header of Forge's own pages.

The chat and login pages load only same-origin scripts, styles and sockets;
the header says so to the browser (a ``<meta>`` tag alone is applied late and
cannot set every directive). Paths in ``FORGE_CSP_EXEMPT`` (the admin, the API
docs, whose pages come from Django and drf-spectacular with inline code) are
left to their own defaults.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def policy(request: HttpRequest) -> str:
    host = request.get_host()
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src 'self' ws://{host} wss://{host}; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            "Content-Security-Policy" not in response
            and response.get("Content-Type", "").startswith("text/html")
            and not request.path.startswith(tuple(settings.FORGE_CSP_EXEMPT))
        ):
            response["Content-Security-Policy"] = policy(request)
        return response
