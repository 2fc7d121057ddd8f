"""Request body parsers: JSON that refuses what would crash the decoder, and the
export format (JSON Lines), which the import route reads itself."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser


class SafeJSONParser(JSONParser):
    """DRF's JSON parser; JSON nested deeper than Python's recursion limit is a 400
    ``parse_error`` instead of a ``RecursionError`` (a 500)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class NDJSONParser(BaseParser):
    """``application/x-ndjson`` (an exported log): accepted, and left unread.

    A parser, so that DRF accepts the media type (another is 415) and a browser's
    import with a CSRF token passes DRF's CSRF check (which parses the body of every
    POST). It reads nothing: the import view reads the body itself, once it has
    checked the caller, and no further than its size limit
    (``forge.server_limits.read_body``).
    """

    media_type = "application/x-ndjson"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        return {}
