"""DRF's cursor paging, with every bad input a 400 ``invalid_cursor`` like every other
route's: a ``limit`` out of range (DRF falls back to the default page) and a cursor
that does not decode (DRF's 404), or whose position is not one of the list's
(DRF hands it to the database: a date that is none was a 500, a NUL reached
PostgreSQL)."""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import parse_qs

from rest_framework.exceptions import NotFound as DRFNotFound
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request

from forge.params import parse_limit
from sessions.exceptions import InvalidCursor

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_CURSOR_KEYS = {"o", "r", "p"}


def _written_by_drf(encoded: str, cutoff: int) -> bool:
    """Whether ``encoded`` is a cursor as DRF writes one: base64 (which DRF's decoding
    reads leniently, dropping any other character: ``!!!!`` was the first page) of a
    query string of its keys only, with an offset DRF would write (it clamps a larger
    one to its cutoff: an offset of ten million was a page)."""
    if len(encoded) > 4096 or not _BASE64.fullmatch(encoded):
        return False
    try:
        text = base64.b64decode(encoded, validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return False
    tokens = parse_qs(text, keep_blank_values=True)
    if not tokens or not set(tokens) <= _CURSOR_KEYS or any(len(v) > 1 for v in tokens.values()):
        return False
    offset = tokens.get("o", ["0"])[0]
    return offset.isdigit() and int(offset) <= cutoff and tokens.get("r", ["0"])[0] in ("0", "1")


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
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded and not _written_by_drf(encoded, self.offset_cutoff):
            raise InvalidCursor("cursor is not a position of this list")
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
