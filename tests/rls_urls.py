"""A URLconf for the row-level security tests only: a view that reads tenant-owned
tables with raw SQL, with no tenant filter of its own, and views whose streamed bodies
report the tenants they were read under."""

from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.db import connection
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import tenancy
from forge.access import tenant_of

TABLES = ("forge_sessions_session", "forge_sessions_message", "memory_memorycore")


def _seen() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT DISTINCT tenant_id FROM {table}")
            seen[table] = sorted(row[0] for row in cursor.fetchall())
    return seen


@api_view(["GET"])
def everything(request: Request) -> Response:
    tenant_of(request.user)  # what every face does first
    return Response(_seen())


@api_view(["GET"])
def streamed(request: Request) -> StreamingHttpResponse:
    """Each chunk of the body: the tenants visible while it is read, as a line."""
    tenant_of(request.user)

    def body() -> Iterator[str]:
        for _ in range(3):
            yield tenancy.visible() + "\n"

    return StreamingHttpResponse(body())


async def streamed_async(request: HttpRequest) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[str]:
        for _ in range(3):
            yield tenancy.visible() + "\n"

    return StreamingHttpResponse(body())


urlpatterns = [
    path("everything/", everything),
    path("streamed/", streamed),
    path("streamed-async/", streamed_async),
]
