"""``GET /api/usage/?from=&to=&group_by=&user=``: what was used, per UTC day range.

* ``from`` / ``to``: UTC days ``YYYY-MM-DD``, both included; default: ``to`` today,
  ``from`` the first day of ``to``'s month. ``to`` before ``from``, or a range over
  366 days, is a 400.
* ``group_by``: ``user``, ``agent``, ``model`` or ``day`` (default ``day``).
* Staff see their tenant's usage (every user; ``user=<id>`` narrows it to one);
  anyone else sees their own only (``user`` naming someone else is a 403).

Each row: the group's value, ``turns``, ``steps``, the token counts, ``cost``,
``failed``, ``aborted`` and ``tool_calls`` (``forge.usage``: a fold of the logs).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from forge.access import tenant_of
from forge.usage import selectors
from forge.usage.days import parse_day

MAX_DAYS = 366


# --- documentation-only shapes ----------------------------------------------------------


class UsageRowSerializer(serializers.Serializer):
    user = serializers.IntegerField(required=False, help_text="with group_by=user")
    agent = serializers.CharField(required=False, help_text="with group_by=agent")
    model = serializers.CharField(required=False, help_text="with group_by=model")
    day = serializers.DateField(required=False, help_text="with group_by=day")
    turns = serializers.IntegerField()
    steps = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    cost = serializers.FloatField()
    failed = serializers.IntegerField()
    aborted = serializers.IntegerField()
    tool_calls = serializers.IntegerField()


UsageReportSerializer = type(
    "UsageReportSerializer",
    (serializers.Serializer,),
    {
        # "from" is a Python keyword: the field is declared by name.
        "from": serializers.DateField(),
        "to": serializers.DateField(),
        "group_by": serializers.ChoiceField(choices=list(selectors.GROUPS)),
        "results": UsageRowSerializer(many=True),
    },
)


def _day(raw: str | None, *, name: str, default: dt.date) -> dt.date:
    if raw is None or raw == "":
        return default
    try:
        return parse_day(raw)
    except ValueError:
        raise ValidationError({name: f"expected a day YYYY-MM-DD, got {raw[:40]!r}"}) from None


def _user(raw: str | None, request: Request) -> int | None:
    """Whose usage: staff who may view usage (``forge.view_usage``, as the dashboard
    asks; superusers) see their tenant's, and any user of it; everyone else themselves.
    Staff alone was enough here, while the admin refused them (QA)."""
    staff = bool(request.user.is_staff) and request.user.has_perm("forge.view_usage")
    own = int(str(request.user.pk))
    if raw is None or raw == "":
        return None if staff else own
    # ASCII digits only ("²" and "٣" are digits to str.isdigit), within a database id.
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise ValidationError({"user": f"expected a user id, got {raw[:40]!r}"})
    if not staff and int(raw) != own:
        raise PermissionDenied(
            "only staff with the forge.view_usage permission see the usage of other users"
        )
    return int(raw)


class UsageView(APIView):
    @extend_schema(
        operation_id="usage_list",
        parameters=[
            OpenApiParameter("from", str, description="first UTC day, YYYY-MM-DD"),
            OpenApiParameter("to", str, description="last UTC day, YYYY-MM-DD"),
            OpenApiParameter("group_by", str, enum=list(selectors.GROUPS)),
            OpenApiParameter("user", int, description="staff: one user's usage"),
        ],
        responses=UsageReportSerializer,
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        today = dt.datetime.now(dt.UTC).date()
        end = _day(params.get("to"), name="to", default=today)
        # Without ``from``: the first day of ``to``'s month (this month's, by default), so
        # that "up to the 30th of last month" needs no ``from`` (it was a 400).
        start = _day(params.get("from"), name="from", default=end.replace(day=1))
        if end < start:
            raise ValidationError({"to": "must not be before from"})
        if (end - start).days >= MAX_DAYS:
            raise ValidationError({"to": f"a range covers at most {MAX_DAYS} days"})
        group_by = params.get("group_by") or "day"
        if group_by not in selectors.GROUPS:
            raise ValidationError({"group_by": f"one of {', '.join(selectors.GROUPS)}"})
        user_id = _user(params.get("user"), request)
        rows = selectors.report(
            tenant=tenant_of(request.user),
            user_id=user_id,
            start=start,
            end=end,
            group_by=group_by,
        )
        body: dict[str, Any] = {
            "from": start.isoformat(),
            "to": end.isoformat(),
            "group_by": group_by,
            "results": rows,
        }
        return Response(body)
