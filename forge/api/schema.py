"""The error answers of the OpenAPI schema (``/api/schema/``): every status a route can
answer is documented, so a client generated from the schema knows them all
(``tests/fuzz/test_api_schema.py`` accepts nothing else).

Every error is the same body, ``{"error": {"code", "message"}}`` (``forge.api.errors``).
Statuses that any route may answer are added to every operation by
:func:`document_errors` (a drf-spectacular postprocessing hook); a route's own
(409 busy, 413 too large, …) are declared on its view with :func:`errors`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="stable, e.g. invalid, not_found, busy, too_large")
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class MessageItemSerializer(serializers.Serializer):
    """A message with its parts, as the log projects them (CONTRACT §2)."""

    info = serializers.DictField(help_text="the message: id, role, parent_id, time, …")
    parts = serializers.ListField(child=serializers.DictField(), help_text="its parts, in order")


class MessagePageSerializer(serializers.Serializer):
    """``GET …/messages/``: a page of history, newest page first, oldest first within."""

    results = MessageItemSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="the older page, or null")
    previous = serializers.CharField(allow_null=True)
    head_seq = serializers.IntegerField(help_text="the log's head when the page was read")


class EventPageSerializer(serializers.Serializer):
    """``GET …/events/``: durable events after a seq, in seq order (CONTRACT §2)."""

    results = serializers.ListField(
        child=serializers.DictField(), help_text="events: {id, seq, type, data, at, …}"
    )
    next = serializers.CharField(allow_null=True, help_text="the next page, or null")
    previous = serializers.CharField(allow_null=True)


MEANINGS = {
    400: "bad input (invalid, invalid_cursor, invalid_prompt, log_integrity, …)",
    401: "no credentials, or credentials that do not authenticate (not_authenticated)",
    403: "a user in no tenant (no_tenant), or a cookie without its CSRF token",
    404: "no such object in the caller's tenant (not_found), another tenant's included",
    409: "the session's state refuses it now (busy, not_running, …)",
    413: "too large (too_large)",
    415: "a request body of another media type",
    429: "rate limited (throttled)",
    502: "the model behind the request failed (compaction_failed)",
    503: "the channel layer (Redis) is away: stream_unavailable or abort_unavailable, with "
    "Retry-After",
}


def errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """``extend_schema(responses=…)`` entries for a route's own error statuses."""
    return {
        status: OpenApiResponse(response=ErrorSerializer, description=MEANINGS[status])
        for status in statuses
    }


_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _response(status: int) -> dict[str, Any]:
    return {
        "description": MEANINGS[status],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def document_errors(result: dict[str, Any], generator: Any, request: Any, public: Any) -> Any:
    """Add to every operation the error statuses any route may answer: 401, 403 and 429
    (authentication, tenancy, throttles are every route's); 404 where the path names
    an object; 400 where there is input (query parameters or a body); 415 where there
    is a body."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault(
        "Error",
        {
            "type": "object",
            "properties": {
                "error": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                    "required": ["code", "message"],
                }
            },
            "required": ["error"],
        },
    )
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            parameters = operation.get("parameters", [])
            statuses = [401, 403, 429]
            if any(p.get("in") == "path" for p in parameters):
                statuses.append(404)
            if "requestBody" in operation or any(p.get("in") == "query" for p in parameters):
                statuses.append(400)
            if "requestBody" in operation:
                statuses.append(415)
            responses = operation.setdefault("responses", {})
            for status in statuses:
                responses.setdefault(str(status), _response(status))
    return result


# The SSE route is a plain async Django view (DRF would buffer the stream), so
# drf-spectacular does not see it: it is written out here, as its view answers.
STREAM_PATH = "/api/sessions/{id}/stream/"


def document_streams(result: dict[str, Any], generator: Any, request: Any, public: Any) -> Any:
    """Add ``GET /api/sessions/{id}/stream/`` (``forge.api.sse``) to the schema."""
    paths = result.setdefault("paths", {})
    security = next(
        (
            operation["security"]
            for item in paths.values()
            for operation in item.values()
            if isinstance(operation, dict) and "security" in operation
        ),
        None,
    )
    operation: dict[str, Any] = {
        "operationId": "sessions_stream_retrieve",
        "summary": "The session as Server-Sent Events (CONTRACT §3)",
        "description": (
            "Durable frames carry `id: <seq>`; resume with `Last-Event-ID` or `?after=`. "
            "Snapshots, deltas and status frames have no id; an idle stream gets a "
            "comment every FORGE_SSE_HEARTBEAT seconds. It never ends by itself, but "
            "for a deleted session (a `not_found` error frame)."
        ),
        "tags": ["sessions"],
        "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
            {
                "name": "after",
                "in": "query",
                "schema": {"type": "integer", "minimum": 0},
                "description": "resume after this seq (ASCII digits)",
            },
            {
                "name": "Last-Event-ID",
                "in": "header",
                "schema": {"type": "string"},
                "description": "what a browser's EventSource sends when it reconnects",
            },
        ],
        "responses": {
            "200": {
                "description": "the stream",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            "400": _response(400),
            "404": _response(404),
            "405": {
                "description": "another method than GET (method_not_allowed)",
                "content": {"application/json": {"schema": _ERROR_REF}},
            },
            "503": _response(503),
        },
    }
    if security is not None:
        operation["security"] = security
    paths[STREAM_PATH] = {"get": operation}
    return result
