"""Content negotiation of the routes that answer with a UI message stream.

``POST /api/chat`` and ``GET /api/chat/{id}/stream`` answer with ``text/event-stream``
(a streaming response, not one of DRF's renderers) and with JSON when they refuse.
DRF's negotiation knows only the renderers, so a client that asked for what these
routes send (``Accept: text/event-stream``, as fetch-event-source and SSE proxies
do) got 406 ``not_acceptable`` before the view ran, while the session's own SSE route
took the same header (QA MEDIUM). Such a client now gets the stream, and the JSON of
a refusal; any other unmatched ``Accept`` is still a 406.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer

STREAM = "text/event-stream"
# What the stream routes write besides the stream: JSON refusals only (the browsable
# API's HTML matched ``Accept: text/*``).
STREAM_ROUTE_RENDERERS = [JSONRenderer]


def asks_for_stream(accept: str) -> bool:
    """Whether an ``Accept`` header takes ``text/event-stream`` (``text/*`` included;
    ``*/*`` is DRF's own match already)."""
    for item in accept.split(","):
        media, _, _ = item.partition(";")
        if media.strip().lower() in (STREAM, "text/*"):
            return True
    return False


class StreamNegotiation(DefaultContentNegotiation):
    def select_renderer(
        self, request: Any, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderers = list(renderers)
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except NotAcceptable:
            if not asks_for_stream(request.META.get("HTTP_ACCEPT", "")):
                raise
            renderer = renderers[0]  # JSON: what a refusal is written in
            return renderer, renderer.media_type
