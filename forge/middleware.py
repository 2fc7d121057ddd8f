"""Forge's middleware: the tenants a request may see, the Content-Security-Policy
response header of Forge's own pages, and no caching of private responses.

The header:

The chat and login pages load only same-origin scripts, styles and sockets;
the header says so to the browser (a ``<meta>`` tag alone is applied late and
cannot set every directive). Paths in ``FORGE_CSP_EXEMPT`` (the admin, the API
docs, whose pages come from Django and drf-spectacular with inline code) are
left to their own defaults.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.cache import patch_cache_control

from accounts import tenancy
from accounts.models import Membership


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


class PrivateResponsesMiddleware:
    """``Cache-Control: no-store, private`` on every dynamic response that says nothing
    of caching: the chat page (the user's name, a CSRF token), the API's sessions,
    messages, exports and memory. Browsers kept them in the back/forward cache after a
    logout, and a misconfigured shared cache could keep them (QA); the admin and login
    pages already said so. Static files never reach this (WhiteNoise answers first)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Cache-Control" not in response:
            patch_cache_control(response, no_store=True, private=True)
        return response


class TenancyMiddleware:
    """What a request may see in the tenant-owned tables (``accounts.tenancy``): nothing
    until it is known who asks; a logged-in user's tenants (the admin, the chat page);
    every tenant for a superuser. The API narrows it to the caller's one tenant
    (``forge.access.tenant_of``), token-authenticated requests included."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        with tenancy.scope(tenants_of(user)):
            response = self.get_response(request)
            if isinstance(response, StreamingHttpResponse) and not isinstance(
                response, FileResponse
            ):
                keep_tenants(response, tenancy.visible())
            return response


def keep_tenants(response: StreamingHttpResponse, tenants: str) -> None:
    """Read ``response``'s body under ``tenants``, as its view saw them.

    A streamed body (the export, SSE, the AI SDK stream) is read by the server
    after the view returned and this middleware's scope ended, in a context of its
    own (a worker thread for a synchronous iterator). Under row-level security a
    query there would see no tenant at all: the export once came back as its header
    line only. Every step of the body's iterator runs in the view's scope again; the
    scope is never held across a ``yield``, so it cannot leak into the server's code.
    (Files, ``FileResponse``, read no table and keep their server's file fast path.)
    """
    content = response.streaming_content
    if response.is_async:
        response.streaming_content = _scoped_async(content, tenants)
    else:
        response.streaming_content = _scoped(content, tenants)


def _scoped(content: Any, tenants: str) -> Iterator[Any]:
    iterator = iter(content)
    try:
        while True:
            with tenancy.scope_value(tenants):
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
            yield chunk
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            with tenancy.scope_value(tenants):
                close()


async def _scoped_async(content: Any, tenants: str) -> AsyncIterator[Any]:
    iterator = aiter(content)
    try:
        while True:
            with tenancy.scope_value(tenants):
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    return
            yield chunk
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            with tenancy.scope_value(tenants):
                await close()


def tenants_of(user: Any) -> list[int] | str:
    if user is None or not user.is_authenticated:
        return []
    if user.is_superuser:
        return tenancy.ALL
    return list(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", flat=True))
