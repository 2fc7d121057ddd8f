"""Project-level error pages: JSON under /api/, Django's pages elsewhere."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from forge.api.errors import json_404, json_500


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_404(request, exception)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        return json_500(request)
    return defaults.server_error(request)
