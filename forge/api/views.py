"""The sessions API (CONTRACT §3). Thin: parse, call a selector or a service or the
runtime's entry, shape the answer. Everything is scoped to the caller's tenant
(``forge.access``); another tenant's session is a 404. Errors are translated
in one place, ``forge.api.errors``."""

from __future__ import annotations

import datetime as dt
import io
from functools import cached_property
from typing import Any, cast
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from accounts.models import Tenant
from forge import runtime, server_limits
from forge.access import session_of, tenant_of
from forge.context import request_for
from forge.db.routing import lagging_read, session_iter, session_read
from forge.errors import InvalidAnswer, SessionBusy
from forge.params import parse_flag, parse_limit, parse_seq
from forge.realtime.stream import check_after
from forge.runtime.agents import get_agent
from forge.throttling import PromptRateThrottle
from sessions import selectors, services
from sessions.models import Session

from .paging import CheckedCursorPagination
from .parsers import NDJSONParser, PromptJSONParser, SafeJSONParser
from .schema import EventPageSerializer, MessagePageSerializer, errors
from .serializers import (
    ApprovalSerializer,
    ForkSerializer,
    PromptSerializer,
    SessionCreateSerializer,
    SessionDetailSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
    page_body,
)


class SessionPagination(CheckedCursorPagination):
    """Most recent first; ``limit`` 1 to 200 and the cursor checked (``forge.api.paging``):
    a position is a time, as DRF writes ``updated_at`` into the cursor."""

    ordering = ("-updated_at", "-id")
    page_size = 50
    max_page_size = 200

    def check_position(self, position: str) -> bool:
        try:
            moment = parse_datetime(position)
            if moment is not None and moment.tzinfo is not None:
                moment.astimezone(dt.UTC)  # 9999-12-31T23:59-23:00 is past the last date
        except (ValueError, OverflowError):  # well formed, but no date (a 13th month)
            return False
        return moment is not None


def _url(request: Request, **params: Any) -> str:
    query = {k: v for k, v in {**request.query_params.dict(), **params}.items() if v is not None}
    return request.build_absolute_uri(request.path) + "?" + urlencode(query)


class SessionViewSet(GenericViewSet):
    """Sessions, their history, their log, and their turns."""

    serializer_class = SessionSerializer
    pagination_class = SessionPagination
    lookup_value_regex = r"[A-Za-z0-9_-]{1,64}"

    @property
    def user(self) -> AbstractBaseUser:
        user = self.request.user
        assert isinstance(user, AbstractBaseUser)  # IsAuthenticated let only users in
        return user

    @cached_property
    def tenant(self) -> Tenant:
        return tenant_of(self.request.user)

    def get_queryset(self) -> QuerySet[Session]:
        return runtime.with_busy(selectors.list_sessions(tenant=self.tenant))

    def get_object(self) -> Session:
        return session_of(self.request.user, self.kwargs["pk"], tenant=self.tenant)

    def get_throttles(self) -> list[Any]:
        if self.action == "messages" and self.request.method == "POST":
            return [*super().get_throttles(), PromptRateThrottle()]
        return super().get_throttles()

    def _session_body(self, session: Session) -> dict[str, Any]:
        session.busy = runtime.is_busy(session_id=session.pk, tenant_id=session.tenant_id)  # type: ignore[attr-defined]
        return SessionSerializer(session).data

    # --- sessions -------------------------------------------------------------------

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(SessionSerializer(page, many=True).data)

    @extend_schema(request=SessionCreateSerializer, responses={201: SessionSerializer})
    def create(self, request: Request) -> Response:
        data = SessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = data.validated_data["agent"]
        if agent:
            get_agent(agent)
        session = services.create_session(
            user=self.user, tenant=self.tenant, title=data.validated_data["title"], agent=agent
        )
        return Response(self._session_body(session), status=status.HTTP_201_CREATED)

    @extend_schema(responses=SessionDetailSerializer)
    def retrieve(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        pending = runtime.pending_approvals(tenant=self.tenant, session=session)
        return Response({**self._session_body(session), "pending_approvals": pending})

    @extend_schema(request=SessionUpdateSerializer, responses=SessionSerializer)
    def partial_update(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        data = SessionUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        if not data.validated_data:
            raise ValidationError({"title": "give a title or an agent to change"})
        if data.validated_data.get("agent"):
            get_agent(data.validated_data["agent"])
        services.update_session(session=session, **data.validated_data)
        return Response(self._session_body(session))

    @extend_schema(responses={204: None, **errors(409)})
    def destroy(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        try:
            runtime.delete_session(session=session)
        except SessionBusy as exc:
            raise SessionBusy(
                "the session is running a turn; abort it first", retry_after=exc.retry_after
            ) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    # --- history and prompts ----------------------------------------------------------

    @extend_schema(
        methods=["GET"],
        parameters=[
            OpenApiParameter("limit", int, description="messages per page, at most 200"),
            OpenApiParameter("before", str, description="the next page's cursor"),
        ],
        responses=MessagePageSerializer,
    )
    @extend_schema(
        methods=["POST"],
        request=PromptSerializer,
        parameters=[
            OpenApiParameter(
                "wait",
                str,
                enum=["1", "true", "yes", "0", "false", "no"],
                description="answer once the reply is complete (200), not at once (202)",
            )
        ],
        responses={
            202: OpenApiTypes.OBJECT,
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="with ?wait=1"),
            **errors(409, 413),
        },
    )
    @action(
        detail=True,
        methods=["get", "post"],
        parser_classes=[PromptJSONParser, MultiPartParser, FormParser],
    )
    def messages(self, request: Request, pk: str) -> Response:
        if request.method == "POST":
            return self._prompt(request)
        limit = parse_limit(
            request.query_params.get("limit"),
            default=selectors.PAGE_DEFAULT,
            maximum=selectors.PAGE_MAX,
        )
        # Read before the page: a client that resumes the stream after this seq sees
        # every change the page might have missed (and re-applies some it has, by id).
        # Both reads on the replica when there is one and it has the whole log (its
        # head on the primary), so head_seq is the head of what the page shows, and the
        # caller's own writes are in it (forge.db.routing).
        head, page = session_read(
            lambda: (
                selectors.head_seq(tenant=self.tenant, session_id=pk),
                selectors.message_page(
                    tenant=self.tenant,
                    session_id=pk,
                    limit=limit,
                    before=request.query_params.get("before"),
                ),
            ),
            tenant=self.tenant,
            session_id=pk,
        )
        next_url = _url(request, before=page.next_before, limit=limit) if page.next_before else None
        response = Response({**page_body(page.items, next_url), "head_seq": head})
        if next_url:
            response["Link"] = f'<{next_url}>; rel="next"'
        return response

    def _prompt(self, request: Request) -> Response:
        session = self.get_object()
        data: Any = request.data
        if not isinstance(data, dict):
            raise ValidationError({"text": "send an object: {text, agent?, files?}"})
        if hasattr(data, "getlist"):  # multipart: text and agent fields, files as uploads
            if "files" in request.POST:  # a form field, not an upload: it was dropped (QA)
                raise ValidationError({"files": ["send each file as an upload (a file field)"]})
            uploads = [
                runtime.Attachment(
                    filename=f.name or "", content=f.read(), mime=f.content_type or ""
                )
                for f in request.FILES.getlist("files")
            ]
            text = data.get("text")
            if isinstance(text, str):  # browsers send a form's line breaks as CRLF
                text = text.replace("\r\n", "\n")
            data = {"text": text, "agent": data.get("agent") or None}
        else:
            uploads = []
        prompt = PromptSerializer(data=data)
        prompt.is_valid(raise_exception=True)
        files = uploads + [
            runtime.Attachment(filename=f["filename"], content=f["content"], mime=f["mime"])
            for f in prompt.validated_data["files"]
        ]
        wait = parse_flag(request.query_params.get("wait"), name="wait")
        result = runtime.prompt(
            session=session,
            text=prompt.validated_data["text"],
            agent=prompt.validated_data["agent"],
            files=files,
            wait=wait,
            # Memory is the speaker's, whoever owns the session (authenticated: get_object).
            speaker=cast(AbstractBaseUser, request.user),
        )
        body: dict[str, Any] = {
            "message": result.message,
            "assistant_message_id": result.assistant_message_id,
        }
        if wait:
            body["reply"] = result.reply
            return Response(body, status=status.HTTP_200_OK)
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="the seq to read after (0: from the start)"),
            OpenApiParameter("limit", int, description="events per page, at most 1000"),
        ],
        responses=EventPageSerializer,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str) -> Response:
        after = parse_seq(request.query_params.get("after"), name="after", default=0)
        limit = parse_limit(
            request.query_params.get("limit"), default=500, maximum=selectors.EVENTS_PAGE_MAX
        )
        events = selectors.events_after(tenant=self.tenant, session_id=pk, after=after, limit=limit)
        if not events and after:
            # Past the head: 400, as the socket and SSE refuse it (a client polling from
            # there would silently miss what comes next).
            check_after(self.get_object(), after)
        next_url = (
            _url(request, after=events[-1]["seq"], limit=limit) if len(events) == limit else None
        )
        response = Response(page_body(events, next_url))
        if next_url:
            response["Link"] = f'<{next_url}>; rel="next"'
        return response

    @extend_schema(request=None, responses={200: OpenApiTypes.OBJECT, **errors(409, 503)})
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        runtime.abort(session=session)
        return Response({"aborted": True, "session": self._session_body(session)})

    @extend_schema(
        request=ApprovalSerializer, responses={202: OpenApiTypes.OBJECT, **errors(400, 404, 409)}
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"approvals/(?P<call_id>[^/]{1,200})",
        url_name="approval",
        parser_classes=[SafeJSONParser],
    )
    def approval(self, request: Request, pk: str, call_id: str) -> Response:
        """Answer a tool call awaiting approval (the session's owner only): 202 once the
        answer is logged; the turn goes on in this process (docs/approvals.md)."""
        session = self.get_object()
        data: Any = request.data
        if not isinstance(data, dict) or not isinstance(data.get("approve"), bool):
            raise InvalidAnswer("send an object: {approve: true|false, reason?}")
        runtime.answer_sync(
            session=session,
            user=request.user,
            call_id=call_id,
            approve=data["approve"],
            reason=data.get("reason", ""),
        )
        return Response(
            {"call_id": call_id, "approved": data["approve"]}, status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT, **errors(400, 409, 502)})
    @action(detail=True, methods=["post"])
    def compact(self, request: Request, pk: str) -> Response:
        """Start compacting now: 202, then the boundary's frames on the session's stream
        (400 on an empty session or with nothing new since the last compaction, 409
        while busy)."""
        session = self.get_object()
        runtime.compact(session=session, requester_id=request.user.pk)
        return Response(
            {"compacting": True, "session": self._session_body(session)},
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(request=ForkSerializer, responses={201: SessionSerializer})
    @action(detail=True, methods=["post"])
    def fork(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        data = ForkSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fork = runtime.fork_session(
            session=session, user=self.user, before_message_id=data.validated_data["message_id"]
        )
        return Response(self._session_body(fork), status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("at", int, description="as of this seq (default: the end)")],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def context(self, request: Request, pk: str) -> Response:
        session = self.get_object()
        at = request.query_params.get("at")
        seq = None if at in (None, "") else parse_seq(at, name="at", default=0)
        if seq is None:
            model, model_request = request_for(session, at=seq)
        else:  # the log as of a seq: the replica, once it has replayed that far
            model, model_request = lagging_read(
                lambda: request_for(session, at=seq), at_least=(self.tenant, session.pk, seq)
            )
        return Response({"at": seq, "provider_model": model, **model_request.as_dict()})

    @extend_schema(responses={(200, "application/x-ndjson"): OpenApiTypes.STR})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str) -> StreamingHttpResponse:
        session = self.get_object()

        response = StreamingHttpResponse(
            session_iter(
                lambda using: selectors.export_lines(session=session, using=using),
                tenant=self.tenant,
                session_id=session.pk,
            ),
            content_type="application/x-ndjson",
        )
        response["Content-Disposition"] = f'attachment; filename="{session.pk}.jsonl"'
        return response

    @extend_schema(
        request={"application/x-ndjson": OpenApiTypes.STR},
        responses={201: OpenApiTypes.OBJECT, **errors(413)},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        url_name="import",
        parser_classes=[NDJSONParser],
    )
    def import_(self, request: Request) -> Response:
        """Import an export file as a **copy**: new ids and a new chain recording the
        source's id and head hash, whatever ``?copy`` says. A session id an importer
        chose is never kept here, so no one can squat an id, or learn whether one
        exists; the operator's ``import_session`` may keep free ids.

        The caller's tenant is checked first, then the size (``FORGE_MAX_IMPORT_BYTES``,
        413: by ``Content-Length`` before anything is read; under daphne the server
        refuses it as it arrives, ``forge.server_limits``), and only then is the file
        read and parsed."""
        self.tenant  # noqa: B018 - the caller must belong to a tenant, before any reading
        request.data  # noqa: B018 - the media type must be an export file's (else 415)
        body = server_limits.read_body(request._request, limit=settings.FORGE_MAX_IMPORT_BYTES)
        events = services.parse_log(io.BytesIO(body))
        session = services.import_log(user=self.user, events=events, copy=True)
        return Response({"id": session.pk}, status=status.HTTP_201_CREATED)
