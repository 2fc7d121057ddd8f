"""DRF's cursor paging, with every bad input a 400 ``invalid_cursor`` like every other
route's: a ``limit`` out of range (DRF falls back to the default page) and a cursor
that does not decode (DRF's 404), or whose position is not one of the list's
(DRF hands it to the database: a date that is none was a 500, a NUL reached
PostgreSQL)."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound as DRFNotFound
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from forge.params import parse_limit
from sessions.exceptions import InvalidCursor


class CheckedCursorPagination(CursorPagination):
    """``limit`` is 1 to ``max_page_size`` (``forge.params.parse_limit``); a cursor's
    position must pass :meth:`check_position`, else ``InvalidCursor``."""

    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        assert isinstance(self.page_size, int)
        assert isinstance(self.max_page_size, int)
        return parse_limit(
            request.query_params.get(self.page_size_query_param),
            default=self.page_size,
            maximum=self.max_page_size,
        )

    def decode_cursor(self, request: Request) -> Any:
        try:
            cursor = super().decode_cursor(request)
        except DRFNotFound:
            raise InvalidCursor("cursor is not a position of this list") from None
        position = None if cursor is None else cursor.position
        if position is None:
            return cursor
        text = str(position)  # the query string's text (the stubs say int)
        if "\x00" in text or not self.check_position(text):
            raise InvalidCursor("cursor is not a position of this list")
        return cursor

    def check_position(self, position: str) -> bool:
        """Whether ``position`` (the first ordering field's value, as DRF wrote it) is
        one this list's ordering field can hold."""
        raise NotImplementedError
