"""Sessions: create, rename, delete (``session.created`` / ``session.updated``)."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from accounts.exceptions import NoTenant
from accounts.models import Tenant
from accounts.selectors import is_member, tenant_for_user

from .. import bus, sql
from ..exceptions import InvalidEvent, NotFound, SessionMismatch
from ..frames import deleted_frame
from ..ids import is_valid_id
from ..log import format_time
from ..models import Message, Part, Session, SessionEvent
from ..signals import session_deleted, session_deleting
from .append import commit

TITLE_MAX = 255
AGENT_MAX = 64
_UNSET: Any = object()


def session_info(session: Session) -> dict[str, Any]:
    """The session's wire shape, as logged in ``session.created`` / ``session.updated``."""
    return {
        "id": session.pk,
        "title": session.title,
        "agent": session.agent or None,
        "parent_id": session.parent_id,
        "created_at": format_time(session.created_at),
    }


def has_control_characters(text: str) -> bool:
    """Whether ``text`` holds a C0 control character or DEL: a title or an agent's name
    is one line of text (the API's serializers refuse the same, naming the field)."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def clean_title(title: Any) -> str:
    if not isinstance(title, str):
        raise InvalidEvent("title must be a string")
    title = title.strip()
    if len(title) > TITLE_MAX:
        raise InvalidEvent(f"title is longer than {TITLE_MAX} characters")
    if has_control_characters(title):
        raise InvalidEvent("title must not contain control characters")
    return title


def clean_agent(agent: Any) -> str:
    if agent is None:
        return ""
    if not isinstance(agent, str) or len(agent) > AGENT_MAX:
        raise InvalidEvent(f"agent must be a name of at most {AGENT_MAX} characters")
    if has_control_characters(agent):
        raise InvalidEvent("agent must not contain control characters")
    return agent


@transaction.atomic
def create_session(
    *,
    user: AbstractBaseUser,
    tenant: Tenant | None = None,
    title: str = "",
    agent: str | None = None,
    parent: Session | None = None,
    copied_from: dict[str, Any] | None = None,
    chat_alias: str | None = None,
) -> Session:
    """A new session owned by ``user`` in ``tenant`` (default: the user's own tenant).

    Its id is always minted here. ``chat_alias`` (a client's own id for the chat, an
    AI SDK ``useChat`` id) is kept beside it, unique within the tenant: it must be a
    valid id (``InvalidEvent`` otherwise), and one the tenant has already raises
    ``IntegrityError`` (run it in a transaction or savepoint). Another tenant's
    aliases and ids never collide with it.

    ``copied_from`` (``{session_id, head_seq, head_hash}``, an imported copy) is
    recorded in the ``session.created`` event, the first of the new chain."""
    if tenant is None:
        try:
            tenant = tenant_for_user(user)
        except NoTenant as exc:
            raise SessionMismatch(str(exc)) from exc
    elif not is_member(user=user, tenant=tenant):
        raise SessionMismatch(f"user {user.get_username()!r} is not a member of tenant {tenant}")
    if parent is not None and parent.tenant_id != tenant.pk:
        raise SessionMismatch("a parent session must belong to the same tenant")
    if chat_alias is not None and not is_valid_id(chat_alias):
        raise InvalidEvent(f"not a valid chat id: {chat_alias!r}")
    session = Session.objects.create(
        chat_alias=chat_alias,
        tenant=tenant,
        user_id=user.pk,
        title=clean_title(title),
        agent=clean_agent(agent),
        parent=parent,
    )
    session_id = session.pk

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        if head.seq:
            raise InvalidEvent(f"session {session_id!r} already has a log")
        info = session_info(session)
        if copied_from is not None:
            info["copied_from"] = dict(copied_from)
        return "session.created", info

    commit(session, build)
    return session


def update_session(*, session: Session, title: Any = _UNSET, agent: Any = _UNSET) -> SessionEvent:
    """Rename a session or change its default agent (``session.updated``)."""
    new_title = session.title if title is _UNSET else clean_title(title)
    new_agent = session.agent if agent is _UNSET else clean_agent(agent)

    def build(head: sql.Head) -> tuple[str, dict[str, Any]]:
        session.title, session.agent = new_title, new_agent
        return "session.updated", session_info(session)

    return commit(session, build)


@transaction.atomic
def delete_session(*, session: Session) -> None:
    """Delete a session with its whole log, messages and parts. ``session_deleting`` is
    sent first, in the transaction (the application keeps the log's usage on it);
    ``session_deleted`` after commit (it removes the session's files), and the
    session's subscribers get :func:`~sessions.frames.deleted_frame`.

    The database refuses to delete single events; marking the session as
    ``deleting`` first is what lets the triggers allow it, inside this
    transaction only.
    """
    if not Session.objects.filter(pk=session.pk).update(deleting=True):
        raise NotFound(f"session {session.pk!r} does not exist")
    session_deleting.send(sender=Session, session=session)
    Part.objects.filter(session_id=session.pk).delete()
    Message.objects.filter(session_id=session.pk).delete()
    Session.objects.filter(pk=session.pk).delete()
    tenant_id, session_id = session.tenant_id, session.pk
    transaction.on_commit(
        lambda: session_deleted.send(sender=Session, tenant_id=tenant_id, session_id=session_id)
    )
    # Open sockets and streams hear of it now, not when they next send or beat.
    transaction.on_commit(partial(bus.publish_after_commit, session_id, deleted_frame(session_id)))
