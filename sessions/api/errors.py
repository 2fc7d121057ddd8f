"""Every API error is JSON ``{"error": {"code", "message"}}`` with the right status."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from sessions.exceptions import ForgeError

# ForgeError codes → HTTP status (anything else is 400: the request was bad).
STATUS_BY_CODE = {
    "not_found": 404,
    "session_mismatch": 404,
    "busy": 409,
    "not_running": 409,
    "conflict": 409,
    "append_only": 409,
    "too_large": 413,
    "not_implemented": 501,
}


class TooLarge(ForgeError):
    code = "too_large"


class Conflict(ForgeError):
    code = "conflict"


class NotImplementedYet(ForgeError):
    code = "not_implemented"


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def _message(detail: Any) -> str:
    if isinstance(detail, list):
        return "; ".join(_message(item) for item in detail)
    if isinstance(detail, dict):
        return "; ".join(f"{key}: {_message(value)}" for key, value in detail.items())
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ForgeError):
        return Response(error_body(exc.code, str(exc)), status=STATUS_BY_CODE.get(exc.code, 400))
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("too_large", str(exc)), status=413)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    assert isinstance(exc, exceptions.APIException)
    code = exc.get_codes() if isinstance(exc, exceptions.ValidationError) else exc.default_code
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid", _message(exc.detail), fields=exc.detail)
    else:
        response.data = error_body(str(code), _message(exc.detail))
    return response


def json_404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse(error_body("not_found", f"no such route: {request.path}"), status=404)


def json_500(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        error_body("server_error", "the server failed; it has been logged"), status=500
    )
