"""Long-term memory, read-only (CONTRACT §2, §3): ``/api/memory/…``.

* ``GET /api/memory/cores/?agent=&limit=&cursor=``: the caller's own cores (a staff
  member's: the tenant's, as the usage route), newest first, paged with a cursor
  (``limit`` 1..200, default 50). Memory is the speaker's: sessions are shared in a
  tenant, and another member's core or unit is a 404, as one of another tenant.
* ``GET /api/memory/cores/{id}/``: one core.
* ``GET /api/memory/units/{id}/?offset=&limit=``: the unit with its slices and
  its ``conversation_messages`` from ``offset`` (default 0), at most ``limit``
  (1..1000, default 500) of them; ``message_count``, ``offset`` and ``next`` (the
  URL of the following messages, or null) say where the page sits. Slice
  indexes are always over the whole unit. A bad ``offset`` or ``limit`` is 400
  ``invalid_query`` (no cursor here; so is a bad search ``limit``); the core list's
  ``limit`` and ``cursor`` are ``invalid_cursor``, as every cursor list's.
* ``GET /api/memory/search/?q=&agent=&limit=``: the best ``limit`` (1..100,
  default 10) slices of the caller's own memory (their cores in the tenant; one
  agent's with ``agent``) that match ``q`` by summary or raw messages, in words or
  in meaning (``memory.search``), each ``{slice, unit_id, core_id, agent, rank,
  matched, messages: [{index, role, at, snippet}]}`` (``matched``: ``words`` or
  ``meaning``, the latter when only the dense ranking found it; ``rank`` 1 = best; no score, whose
  value would depend on other memory; ``messages`` the best-matching messages
  inside the slice, best first). One page (``next`` is always null). ``q``
  missing is a 400; a ``q`` with no words (empty, only stop words, emoji or
  punctuation) gives no results.

Thin: parse, call a ``memory.selectors`` read, shape the answer. Everything is
scoped to the caller's tenant; another tenant's core or unit is a 404 with the
same body as a missing one. Errors are ``ForgeError``s, translated by
``forge.api.errors``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from accounts.models import Tenant
from forge.access import tenant_of
from forge.db.routing import lagging_read
from forge.params import parse_limit, parse_seq
from memory import selectors
from memory.exceptions import InvalidQuery
from memory.models import AGENT_MAX, MemoryCore
from memory.wire import unit_page_wire
from sessions.ids import is_valid_id

from .paging import CheckedCursorPagination
from .serializers import page_body

CORES_PAGE_DEFAULT = 50
CORES_PAGE_MAX = 200
MESSAGES_PAGE_DEFAULT = 500
MESSAGES_PAGE_MAX = 1000
SEARCH_DEFAULT = selectors.SEARCH_LIMIT
SEARCH_MAX = 100


# --- parameters ---------------------------------------------------------------------------


def agent_param(raw: str | None) -> str | None:
    """The ``agent`` filter: None when missing or empty; 400 for what no agent is called.

    White space around the name is refused, not trimmed: ``?agent=%0a`` trimmed to
    nothing listed every core, unfiltered, and `` build`` matched ``build``."""
    if raw is None or raw == "":
        return None
    if len(raw) > AGENT_MAX or not raw.isprintable() or raw != raw.strip():
        raise InvalidQuery(
            f"agent must be a name of at most {AGENT_MAX} printable characters, "
            "without white space around it"
        )
    return raw


# --- documentation-only shapes (CONTRACT §2) ------------------------------------------------


class MemoryCoreSerializer(serializers.Serializer):
    id = serializers.CharField()
    user = serializers.CharField(help_text="the username")
    agent = serializers.CharField()
    memory_session_id = serializers.CharField()
    units = serializers.ListField(child=serializers.CharField(), help_text="oldest first")


class MemoryMessageSerializer(serializers.Serializer):
    role = serializers.CharField()
    text = serializers.CharField()
    at = serializers.CharField()


class MemorySliceSerializer(serializers.Serializer):
    id = serializers.CharField()
    start_index = serializers.IntegerField(help_text="inclusive, over the whole unit")
    end_index = serializers.IntegerField(help_text="exclusive")
    summary = serializers.CharField()
    created_at = serializers.CharField()


class MemoryUnitSerializer(serializers.Serializer):
    id = serializers.CharField()
    memory_session_id = serializers.CharField()
    updated_at = serializers.CharField()
    conversation_messages = MemoryMessageSerializer(
        many=True, help_text="messages offset .. offset + limit - 1 of the unit"
    )
    slices = MemorySliceSerializer(many=True)
    message_count = serializers.IntegerField(help_text="messages in the whole unit")
    offset = serializers.IntegerField(help_text="index of the first message given")
    next = serializers.CharField(allow_null=True, help_text="URL of the following messages")


class MemoryHitMessageSerializer(serializers.Serializer):
    index = serializers.IntegerField(
        help_text="the message's index in its unit (memory_read's start)", min_value=0
    )
    role = serializers.CharField()
    at = serializers.CharField()
    snippet = serializers.CharField(help_text="about 200 characters around the match")


class MemoryHitSerializer(serializers.Serializer):
    slice = MemorySliceSerializer()
    unit_id = serializers.CharField()
    core_id = serializers.CharField()
    agent = serializers.CharField()
    rank = serializers.IntegerField(
        min_value=1,
        help_text="1 = the best hit; the order depends on the searched memory alone",
    )
    matched = serializers.ChoiceField(
        choices=["words", "meaning"],
        help_text="words: the full text matched the slice; meaning: only its meaning was "
        "near the query's (a search always returns its nearest slices: maybe unrelated)",
    )
    messages = MemoryHitMessageSerializer(
        many=True, help_text="the best-matching messages inside the slice, best first"
    )


class MemorySearchSerializer(serializers.Serializer):
    results = MemoryHitSerializer(many=True)
    next = serializers.CharField(allow_null=True, help_text="always null: one ranked page")
    previous = serializers.CharField(allow_null=True, help_text="always null")


# --- paging ---------------------------------------------------------------------------------


class CorePagination(CheckedCursorPagination):
    """Newest core first (ids sort by creation); ``limit`` and the cursor checked like every
    other list's (``forge.api.paging``)."""

    ordering = ("-id",)
    page_size = CORES_PAGE_DEFAULT
    max_page_size = CORES_PAGE_MAX

    def check_position(self, position: str) -> bool:
        return is_valid_id(position)


def _url(request: Request, **params: Any) -> str:
    query = {k: v for k, v in {**request.query_params.dict(), **params}.items() if v is not None}
    return request.build_absolute_uri(request.path) + "?" + urlencode(query)


# --- the views ------------------------------------------------------------------------------


class MemoryViewSet(GenericViewSet):
    """Long-term memory of the caller's tenant (read-only): cores, units, search."""

    serializer_class = MemoryCoreSerializer
    pagination_class = CorePagination

    @cached_property
    def tenant(self) -> Tenant:
        return tenant_of(self.request.user)

    @property
    def reader(self) -> AbstractBaseUser | None:
        """Whose memory the caller may read: their own, or (None) the tenant's for staff
        who may view memory cores (``memory.view_memorycore``, as the admin asks;
        superusers). A third-round finding: any member read any other's cores and raw
        messages, while search and the tools were the speaker's own; then staff alone,
        with no permission, still read every member's raw dialogue (QA), as usage had
        let them see every member's usage."""
        user = self.request.user
        assert isinstance(user, AbstractBaseUser)
        staff = getattr(user, "is_staff", False) and user.has_perm("memory.view_memorycore")
        return None if staff else user

    def get_queryset(self) -> QuerySet[MemoryCore]:
        agent = agent_param(self.request.query_params.get("agent"))
        return selectors.list_cores(tenant=self.tenant, user=self.reader, agent=agent)

    @extend_schema(
        operation_id="memory_cores_list",
        parameters=[
            OpenApiParameter("agent", str, description="only this agent's cores"),
            OpenApiParameter("limit", int, description=f"cores per page, at most {CORES_PAGE_MAX}"),
            OpenApiParameter("cursor", str, description="the next or previous page's cursor"),
        ],
        responses=MemoryCoreSerializer(many=True),
    )
    def cores(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None  # pagination_class is set
        return self.get_paginated_response(selectors.cores_data(tenant=self.tenant, cores=page))

    @extend_schema(operation_id="memory_core_retrieve", responses=MemoryCoreSerializer)
    def core(self, request: Request, pk: str) -> Response:
        return Response(selectors.core_data(tenant=self.tenant, core_id=pk, user=self.reader))

    @extend_schema(
        operation_id="memory_unit_retrieve",
        parameters=[
            OpenApiParameter("offset", int, description="index of the first message (default 0)"),
            OpenApiParameter(
                "limit", int, description=f"messages to give, at most {MESSAGES_PAGE_MAX}"
            ),
        ],
        responses=MemoryUnitSerializer,
    )
    def unit(self, request: Request, pk: str) -> Response:
        # No cursor here: a bad offset or limit is the memory API's invalid_query.
        offset = parse_seq(
            request.query_params.get("offset"), name="offset", default=0, error=InvalidQuery
        )
        limit = parse_limit(
            request.query_params.get("limit"),
            default=MESSAGES_PAGE_DEFAULT,
            maximum=MESSAGES_PAGE_MAX,
            error=InvalidQuery,
        )
        unit = selectors.get_unit(tenant=self.tenant, unit_id=pk, user=self.reader)
        end = offset + limit
        messages = selectors.unit_message_rows(tenant=self.tenant, unit=unit, start=offset, end=end)
        slices = selectors.unit_slices(tenant=self.tenant, unit=unit)
        next_url = _url(request, offset=end, limit=limit) if end < unit.message_count else None
        return Response(unit_page_wire(unit, messages, slices, offset=offset, next_url=next_url))

    @extend_schema(
        operation_id="memory_search",
        parameters=[
            OpenApiParameter(
                "q",
                str,
                required=True,
                description="what to look for in the caller's memory (summaries and messages)",
            ),
            OpenApiParameter("agent", str, description="only the caller's memory with this agent"),
            OpenApiParameter("limit", int, description=f"hits to give, at most {SEARCH_MAX}"),
        ],
        responses=MemorySearchSerializer,
    )
    def search(self, request: Request) -> Response:
        query = request.query_params.get("q")
        if query is None:
            raise InvalidQuery("give the words to look for: ?q=…")
        agent = agent_param(request.query_params.get("agent"))
        limit = parse_limit(
            request.query_params.get("limit"),
            default=SEARCH_DEFAULT,
            maximum=SEARCH_MAX,
            error=InvalidQuery,
        )
        tenant = self.tenant  # authenticates: the caller is a user of this tenant
        user = request.user
        assert isinstance(user, AbstractBaseUser)
        hits = lagging_read(  # search tolerates lag (forge.db.routing)
            lambda: selectors.search_slices(
                tenant=tenant, query=query, user=user, agent=agent, limit=limit
            )
        )
        return Response(page_body([hit.wire() for hit in hits], None))
