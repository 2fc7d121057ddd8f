"""Request body parsers: JSON that refuses what would crash the decoder, a prompt's JSON
(up to the prompt routes' own limit), and the export format (JSON Lines), which the
import route reads itself."""

from __future__ import annotations

import io
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

from forge.server_limits import prompt_body_limit, too_large
from sessions.storable import surrogate_path


class NotText(ParseError):
    default_code = "invalid"  # as a NUL in the request is (forge.nul)


class SafeJSONParser(JSONParser):
    """DRF's JSON parser; JSON nested deeper than Python's recursion limit is a 400
    ``parse_error`` instead of a ``RecursionError`` (a 500), and a lone UTF-16
    surrogate anywhere in the body (``"\\ud800"``, half a pair, which JSON decodes but
    no UTF-8 text holds) is a 400 ``invalid``: the log cannot store it (a title
    holding one failed the event's hash, a 500) nor the database look it up (an
    agent's name). A pair of escapes is one character, and is text. Walking the
    body costs O(1) per ASCII string (base64 attachments)."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        where = surrogate_path(data, "body")
        if where is not None:
            raise NotText(
                f"the request's {where} holds a lone surrogate (U+D800-U+DFFF, half a "
                "UTF-16 pair), which is no text"
            )
        return data


class PromptJSONParser(BaseParser):
    """A prompt's JSON (``POST …/messages/``, the AI SDK's ``POST /api/chat``), parsed as
    :class:`SafeJSONParser` parses, up to the prompt routes' limit
    (:func:`forge.server_limits.prompt_body_limit`: ten attachments at their limit).

    Not a ``JSONParser``: DRF reads such a parser's body through ``request.body``, which
    Django caps at ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (16 MiB), so two 7 MB attachments
    sent as JSON were a 413 naming that setting, while the same files as multipart
    passed. The body is read here from the request's stream, one byte past the limit
    at most (daphne has already refused a larger one as it arrived)."""

    media_type = "application/json"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        limit = prompt_body_limit()
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise too_large(limit)
        return SafeJSONParser().parse(io.BytesIO(body), media_type, parser_context)


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
