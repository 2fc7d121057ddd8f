"""Project-level error pages: JSON under /api/, Django's pages elsewhere."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from forge.api.errors import json_404, json_500


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_404(request, exception)
    return defaults.page_not_found(request, exception)


@csrf_exempt  # nothing here: a POST without a CSRF token is the 404 it was, not a 403
def api_not_found(request: HttpRequest) -> HttpResponse:
    """The last route under /api/: no route matched, with DEBUG on or off. A GET of a
    route without its trailing slash is redirected to it, as ``APPEND_SLASH`` did when
    nothing matched."""
    if request.method in ("GET", "HEAD") and not request.path_info.endswith("/"):
        try:
            match = resolve(request.path_info + "/")
        except Resolver404:
            match = None
        if match is not None and match.func is not api_not_found:
            return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
    return json_404(request)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_500(request)
    return defaults.server_error(request)
