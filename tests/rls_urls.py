"""A URLconf for the row-level security test only: a view that reads tenant-owned
tables with raw SQL, with no tenant filter of its own."""

from typing import Any

from django.db import connection
from django.urls import path
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from forge.access import tenant_of

TABLES = ("forge_sessions_session", "forge_sessions_message", "memory_memorycore")


@api_view(["GET"])
def everything(request: Request) -> Response:
    tenant_of(request.user)  # what every face does first
    seen: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"SELECT DISTINCT tenant_id FROM {table}")
            seen[table] = sorted(row[0] for row in cursor.fetchall())
    return Response(seen)


urlpatterns = [path("everything/", everything)]
