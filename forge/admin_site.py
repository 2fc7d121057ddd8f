"""The admin site: branded "Forge administration", its index page the operators'
dashboard (forge.dashboard) for those who may view usage (``forge.view_usage``).

The chart is server-side SVG (no script, no CDN): one bar per day, its height the
day's cost (turns when nothing cost anything), the numbers in each bar's title.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

PERIODS = (7, 14, 30, 90)
DEFAULT_PERIOD = 14
CHART_WIDTH, CHART_HEIGHT = 720, 160


def chart(days: list[Any]) -> SafeString:
    """An SVG bar chart of ``days`` (``forge.dashboard.Day``): cost, or turns if no cost."""
    by_cost = any(day.cost for day in days)
    values = [float(day.cost) if by_cost else float(day.turns) for day in days]
    top = max(values, default=0) or 1.0
    slot = CHART_WIDTH / max(1, len(days))
    bars = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#417690">'
        "<title>{}: {} turns, cost {}</title></rect>",
        (
            (
                f"{i * slot + 1:.1f}",
                f"{CHART_HEIGHT - 20 - (CHART_HEIGHT - 30) * value / top:.1f}",
                f"{max(1.0, slot - 2):.1f}",
                f"{(CHART_HEIGHT - 30) * value / top:.1f}",
                day.day.isoformat(),
                day.turns,
                f"{day.cost:.6f}",  # as the usage admin shows cost
            )
            for i, (day, value) in enumerate(zip(days, values, strict=True))
        ),
    )
    labels = format_html_join(
        "",
        '<text x="{}" y="{}" font-size="10" text-anchor="middle">{}</text>',
        (
            (f"{i * slot + slot / 2:.1f}", CHART_HEIGHT - 5, day.day.strftime("%m-%d"))
            for i, day in enumerate(days)
            if len(days) <= 31 or i % 7 == 0
        ),
    )
    return format_html(
        '<svg role="img" aria-label="{} per day" viewBox="0 0 {} {}" width="100%" '
        'xmlns="http://www.w3.org/2000/svg">{}{}'
        '<text x="4" y="12" font-size="11">max {}</text></svg>',
        "cost" if by_cost else "turns",
        CHART_WIDTH,
        CHART_HEIGHT,
        bars,
        labels,
        f"{top:.6f}" if by_cost else int(top),  # as the bars' titles (four read 0.0000)
    )


def lagging_list(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A changelist ``view`` whose GET reads tolerate lag: on the replica when there is one
    (``forge.db.routing``), rendered there (a ``TemplateResponse`` renders lazily, after
    the view returns). An action (POST) reads and writes the primary."""

    @wraps(view)
    def lagging(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return view(request, *args, **kwargs)
        from forge.db.routing import lagging_read

        def render() -> HttpResponse:
            response = view(request, *args, **kwargs)
            if isinstance(response, TemplateResponse):
                response.render()
            return response

        return lagging_read(render)

    return lagging


class ForgeAdminSite(admin.AdminSite):
    site_header = "Forge administration"
    site_title = "Forge administration"
    index_title = "Operations"
    index_template = "admin/forge_index.html"

    @property
    def login_form(self) -> Any:  # type: ignore[override]
        """Failed sign-ins counted (``forge.login_guard``); imported late: the auth forms
        need the apps loaded, and the site is built while they load."""
        from forge.login_guard import AdminLoginForm

        return AdminLoginForm

    def admin_view(self, view: Any, cacheable: bool = False) -> Any:
        """Every model's list page reads the replica (issue 21: the admin's lists tolerate
        lag); the login and permission checks around it, and every other page, read the
        primary. With no replica configured nothing changes."""
        if getattr(view, "__name__", "") == "changelist_view":
            view = lagging_list(view)
        return super().admin_view(view, cacheable)

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        context = dict(extra_context or {})
        if request.user.has_perm("forge.view_usage"):
            from accounts.admin_scope import sees_all, tenant_ids
            from forge.dashboard import dashboard

            try:
                period = int(request.GET.get("days", DEFAULT_PERIOD))
            except ValueError:
                period = DEFAULT_PERIOD
            if period not in PERIODS:
                period = DEFAULT_PERIOD
            board = dashboard(
                tenant_ids=None if sees_all(request) else tenant_ids(request), days=period
            )
            context.update(dashboard=board, chart=chart(board.days), periods=PERIODS, period=period)
        return super().index(request, context)


class ForgeAdminConfig(AdminConfig):
    default_site = "forge.admin_site.ForgeAdminSite"
