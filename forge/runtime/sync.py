"""The runtime for synchronous callers (DRF views, management commands).

Under an ASGI server (a thread working for its event loop) a turn runs as a
task of that loop, exactly as when the socket starts it. Where no event loop
runs (WSGI, a management command) the turn runs to its end before
:func:`prompt` returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.base_user import AbstractBaseUser

from forge.db.worker import release_connections
from sessions import bus, selectors
from sessions.models import Session

from .aborting import abort_turn
from .prompting import Attachment
from .runner import StartedTurn, start_compaction, start_regeneration, start_turn


@dataclass(frozen=True)
class PromptResult:
    message: dict[str, Any]  # the user message, {info, parts}
    assistant_message_id: str
    reply: dict[str, Any] | None  # the finished reply, {info, parts}, when waited for


def prompt(
    *,
    session: Session,
    text: Any,
    agent: Any = None,
    files: Sequence[Attachment] = (),
    wait: bool = False,
    speaker: AbstractBaseUser | None = None,
) -> PromptResult:
    """:func:`~forge.runtime.runner.start_turn` from synchronous code (``speaker``: the
    user who sent the prompt; None for the session's owner).

    Returns once the prompt is logged, or with ``wait`` (and always where no
    server loop runs) once the reply is finished, with the reply.
    """
    return _started(
        session,
        lambda: start_turn(session=session, text=text, agent=agent, files=files, speaker=speaker),
        wait,
    )


def regenerate(
    *,
    session: Session,
    message_id: Any = None,
    wait: bool = False,
    speaker: AbstractBaseUser | None = None,
) -> PromptResult:
    """:func:`~forge.runtime.runner.start_regeneration` from synchronous code; ``message``
    is the prompt answered again, ``speaker`` the user asking. Returns as :func:`prompt`
    does."""
    return _started(
        session,
        lambda: start_regeneration(session=session, message_id=message_id, speaker=speaker),
        wait,
    )


def _started(
    session: Session, start_it: Callable[[], Awaitable[StartedTurn]], wait: bool
) -> PromptResult:
    loop = bus.server_loop()
    if loop is not None:

        async def start() -> StartedTurn:
            started = await start_it()
            if wait:
                await asyncio.wait({started.task})
            return started

        release_connections()
        started = async_to_sync(start)()
        finished = wait
    else:

        async def whole() -> StartedTurn:
            started = await start_it()
            await asyncio.wait({started.task})
            await bus.flush()
            return started

        started = asyncio.run(whole())
        finished = True
    reply = None
    if finished:
        reply = selectors.get_message(
            tenant=session.tenant, session_id=session.pk, message_id=started.assistant_message_id
        )
    return PromptResult(
        message=started.message, assistant_message_id=started.assistant_message_id, reply=reply
    )


def abort(*, session: Session) -> None:
    """:func:`~forge.runtime.aborting.abort_turn` for synchronous callers."""
    release_connections()
    async_to_sync(abort_turn)(session=session)


def compact(
    *, session: Session, wait: bool = False, requester_id: int | None = None
) -> dict[str, Any] | None:
    """:func:`~forge.runtime.runner.start_compaction` from synchronous code. Returns the
    boundary's marker when it waited for the summary (always where no server loop
    runs); raises ``CompactionFailed`` then if the summary failed."""
    loop = bus.server_loop()
    release_connections()
    if loop is not None and not wait:
        async_to_sync(start_compaction)(session=session, requester_id=requester_id)
        return None

    async def whole() -> dict[str, Any]:
        task = await start_compaction(session=session, requester_id=requester_id)
        try:
            return await task
        finally:
            await bus.flush()

    if loop is not None:
        return async_to_sync(whole)()
    return asyncio.run(whole())
