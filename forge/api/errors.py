"""Every API error is JSON ``{"error": {"code", "message"}}`` with the right status.

The one translation of errors for HTTP: a ``ForgeError`` carries its own
``code`` and ``status`` (``accounts.exceptions``); DRF's own exceptions keep
theirs; anything else is a 500 that says nothing of the server's insides.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import Http404, HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from accounts.exceptions import ForgeError

R = TypeVar("R", bound=HttpResponseBase)


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def error_response(exc: ForgeError) -> JsonResponse:
    """A ``ForgeError`` as a plain Django response (for the non-DRF views: SSE)."""
    body = error_body(exc.code, str(exc), **error_extra(exc))
    return _with_headers(JsonResponse(body, status=exc.status), exc)


def error_extra(exc: ForgeError) -> dict[str, Any]:
    """What an error adds to its body beyond code and message (a budget's ``resets_at``)."""
    return dict(exc.extra)


def _with_headers(response: R, exc: ForgeError) -> R:
    """The headers an error's status calls for: ``WWW-Authenticate`` with a 401, and
    ``Retry-After`` when the error says how long to wait (a 503)."""
    if exc.status == 401:
        response["WWW-Authenticate"] = "Token"
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response["Retry-After"] = str(retry_after)
    return response


def _message(detail: Any) -> str:
    if isinstance(detail, list):
        return "; ".join(_message(item) for item in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_message(value)}" for key, value in detail.items())
    return str(detail)


def too_many_fields() -> str:
    """Django's ``TooManyFieldsSent``, said with the limit (its message names a setting)."""
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    return f"too many query parameters or form fields (more than {limit})"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ForgeError):
        body = error_body(exc.code, str(exc), **error_extra(exc))
        return _with_headers(Response(body, status=exc.status), exc)
    if isinstance(exc, RequestDataTooBig):
        # Django's message names its setting: say the limit, as every other 413 does.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = f"the request body is over the limit of {limit} bytes"
        return Response(error_body("too_large", message), status=413)
    if isinstance(exc, (TooManyFieldsSent, TooManyFilesSent)):  # a form body's parse
        return Response(error_body("invalid", too_many_fields()), status=400)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    assert isinstance(exc, exceptions.APIException)
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid", _message(exc.detail), fields=exc.detail)
    else:
        response.data = error_body(str(exc.default_code), _message(exc.detail))
    return response


def json_404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", f"no such route: {request.path}"), status=404)


def json_500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        error_body("server_error", "the server failed; it has been logged"), status=500
    )
