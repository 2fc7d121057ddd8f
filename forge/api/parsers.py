"""Request body parsers: JSON that refuses what would crash the decoder, and the
export format (JSON Lines) as raw bytes for the import route."""

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
    """``application/x-ndjson`` (an exported log), handed to the view as bytes.

    A parser, not ``request.body``, so that a browser's import with a CSRF token
    passes DRF's CSRF check (which reads the form data of every POST).
    """

    media_type = "application/x-ndjson"

    def parse(  # type: ignore[override]  # the view takes the bytes as they are
        self, stream: Any, media_type: Any = None, parser_context: Any = None
    ) -> bytes:
        return stream.read() if stream is not None else b""
