"""Long-term memory, read-only (CONTRACT §3): ``/api/memory/…``. Not built yet: the
memory issue fills it."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from forge.errors import NotImplementedYet


class MemoryViewSet(GenericViewSet):
    """Long-term memory (read-only). Not built yet: its issue fills it."""

    @extend_schema(responses={501: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"])
    def cores(self, request: Request) -> Response:
        raise NotImplementedYet("long-term memory is not built yet")

    @extend_schema(responses={501: OpenApiTypes.OBJECT})
    @action(detail=False, methods=["get"])
    def search(self, request: Request) -> Response:
        raise NotImplementedYet("long-term memory is not built yet")

    @extend_schema(responses={501: OpenApiTypes.OBJECT})
    def unit(self, request: Request, pk: str) -> Response:
        raise NotImplementedYet("long-term memory is not built yet")
