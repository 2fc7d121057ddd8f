"""``GET /api/sessions/<id>/files/<part_id>/``: the stored file of a session's ``file`` part.

A file part's file lives in the session's files (``forge.runtime.files``:
``uploads/t<tenant>/<session>/<part_id>/<name>``), so the path is derived from
the caller's tenant, the session and the part id: no session of another
tenant, and no path outside the session's folder, can ever be named. Streamed,
whatever its size (a tool output over ``FORGE_TOOL_OUTPUT_MAX_BYTES`` is stored
this way, whole).

Served as an attachment, never as content of this origin: its type is the part's
only when that is a passive one (:data:`PASSIVE`: text, images but SVG, PDF, audio,
video), else ``application/octet-stream``, with ``nosniff`` and a sandboxing CSP.
An upload's type is the uploader's word: served as ``text/html`` or
``text/javascript`` from the application's own origin, a file could be a script that
``script-src 'self'`` allows, should any page ever let markup in.
"""

from __future__ import annotations

import re

from django.core.files.storage import default_storage
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request

from forge.access import session_of
from forge.tools.session_files import stored_file
from sessions import selectors
from sessions.exceptions import NotFound

from .schema import errors

_PART_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Types a browser shows without running anything.
PASSIVE = re.compile(
    r"text/(plain|csv|markdown)|image/(png|jpeg|gif|webp|avif|bmp)|application/(pdf|json)"
    r"|audio/[\w.+-]+|video/[\w.+-]+"
)


@extend_schema(responses={200: OpenApiTypes.BINARY, **errors(404)})
@api_view(["GET"])
def session_file(request: Request, session_id: str, part_id: str) -> FileResponse:
    """The file of file part ``part_id`` of the caller's session ``session_id`` (404 when
    there is none)."""
    session = session_of(request.user, session_id)
    if not _PART_ID.fullmatch(part_id):
        raise NotFound(f"no file {part_id!r} in this session")
    path = stored_file(tenant_id=session.tenant_id, session_id=session.pk, part_id=part_id)
    if path is None:
        raise NotFound(f"no file {part_id!r} in this session")
    # Named as the part names it (an upload's name as given; the stored one is reduced).
    part = selectors.part_data(tenant=session.tenant, session=session, part_id=part_id) or {}
    name = part.get("filename") if isinstance(part.get("filename"), str) else None
    given = part.get("mime")
    mime = given if isinstance(given, str) else ""
    response = FileResponse(
        default_storage.open(path, "rb"),
        as_attachment=True,
        filename=name or path.rsplit("/", 1)[-1],
        content_type=mime if PASSIVE.fullmatch(mime.lower()) else "application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response
