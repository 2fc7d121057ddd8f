"""Who is asking, and for what: the one resolver every face uses.

The HTTP API, the SSE stream and the socket all turn a user and a session id
into the caller's tenant and that tenant's session in the same way, with the
same errors: ``NotAuthenticated`` (401) for no user, ``NoTenant`` (403) for a
user in no tenant, ``NotFound`` (404) for a session that does not exist *or
belongs to another tenant* (the two are never told apart).

Tokens are DRF's (``rest_framework.authtoken``): a face that is not a DRF view
authenticates an ``Authorization: Token <key>`` header with DRF's own
``TokenAuthentication``, so a token means the same thing everywhere.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts import tenancy
from accounts.models import Tenant
from accounts.selectors import tenant_for_user
from forge.errors import InvalidToken, NotAuthenticated
from sessions import selectors
from sessions.models import Session


class _Headers:
    """What ``TokenAuthentication`` reads of a request: its ``Authorization`` header."""

    def __init__(self, authorization: bytes | str) -> None:
        self.headers = {"authorization": authorization}
        self.META = {"HTTP_AUTHORIZATION": authorization}


def user_for_authorization(
    authorization: bytes | str, *, fallback: Any = None, strict: bool = False
) -> Any:
    """The user an ``Authorization`` header names (DRF's ``Token <key>``), else anonymous.

    Without the header (``authorization`` empty) the ``fallback`` user is kept
    (the cookie's); a header of another scheme is an anonymous user. A token that
    does not authenticate (unknown, or its user inactive) is an anonymous user too,
    or with ``strict`` (an HTTP face, answering as DRF's views do) ``InvalidToken``
    with DRF's message.
    """
    if not authorization:
        return fallback if fallback is not None else AnonymousUser()
    try:
        found = TokenAuthentication().authenticate(_Headers(authorization))  # type: ignore[arg-type]
    except AuthenticationFailed as exc:
        if strict:
            raise InvalidToken(str(exc.detail)) from exc
        return AnonymousUser()
    return found[0] if found else AnonymousUser()


def tenant_of(user: Any) -> Tenant:
    """The caller's tenant; raises ``NotAuthenticated`` or ``NoTenant``.

    From here on the caller's work sees this tenant's rows only (row-level
    security on PostgreSQL, ``accounts.tenancy``).
    """
    if user is None or not user.is_authenticated:
        raise NotAuthenticated("log in or send a token")
    tenant = tenant_for_user(user)
    tenancy.activate([tenant.pk])
    return tenant


def session_of(user: Any, session_id: str, *, tenant: Tenant | None = None) -> Session:
    """The caller's session ``session_id``; raises as :func:`tenant_of`, or ``NotFound``."""
    return selectors.get_session(tenant=tenant or tenant_of(user), session_id=session_id)


def chat_of(user: Any, chat_id: str, *, tenant: Tenant | None = None) -> Session:
    """The caller's session that ``chat_id`` names as a chat (the AI SDK routes): the
    tenant's session with that id, or with that chat alias; raises as
    :func:`session_of`. Whatever another tenant holds under the same id is never
    seen, nor told apart from nothing."""
    return selectors.get_chat_session(tenant=tenant or tenant_of(user), chat_id=chat_id)
