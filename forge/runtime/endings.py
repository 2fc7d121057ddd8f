"""How a turn that did not end normally ends: aborted (:func:`end_aborted`: a user's
stop, a shutdown, a lost lease) or broken (:func:`end_broken`). Either way the reply is
finalized from what clients were sent, and nothing stays open by accident
(``forge.runtime.steps.run_turn`` owns the choice)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from django.db import transaction

from forge.db.worker import db
from forge.errors import ForgeError
from forge.telemetry import tracing
from sessions import services

from .approvals.pending import ABORTED
from .compaction import estimate_tokens
from .finalize import SHUT_DOWN, finalize_open_messages, message_error
from .processor import Processor
from .turn import Turn

logger = logging.getLogger(__name__)


async def end_aborted(turn: Turn, processor: Processor) -> None:
    """What is still in the delta window reaches clients before the reply is finalized
    with the buffer's text: the stored text is exactly what they saw.

    A user's abort denies the reply's calls awaiting approval (reason ``aborted``)
    so the reply completes as aborted: left waiting, an answer to one ran it and then
    another model step after the user pressed stop. A turn cancelled otherwise (its
    lease lost, the server shutting down) leaves them waiting, as recovery does."""
    if not await turn.confirm_lease():
        # Its lease lost, or not renewed in time: the reply is the lease's next
        # holder's to finalize (from the mirror); this process sends and writes nothing.
        tracing.turn_aborted("lease")
        return
    shutdown = turn.stopped_by_shutdown and not turn.stopped_by_user
    tracing.turn_aborted(
        "user" if turn.stopped_by_user else "shutdown" if shutdown else "cancelled"
    )
    await processor.flush()
    cut_step_end = _cut_step_end(processor)
    if cut_step_end is None:  # a step not served (a retry's wait): its start goes too
        processor.drop_bare_step_start()
    await db(_finalize)(
        processor.take_held(),
        session=turn.session,
        # A shutdown is no user's stop: the reply says the server stopped it.
        reason=SHUT_DOWN if shutdown else ABORTED,
        texts=processor.streamed_texts(),
        message_id=turn.message_id,
        agent=turn.agent.name,
        deny_waiting=ABORTED if turn.stopped_by_user else None,
        cut_step_end=cut_step_end,
    )


def _cut_step_end(processor: Processor) -> dict[str, Any] | None:
    """The cut step's end, or None if it cannot be made: the reply is ended here either
    way, not by the abort's fallback for a reply no runner holds (review)."""
    try:
        return processor.cut_step_end(estimate_tokens)
    except Exception:
        logger.exception(
            "the cut step's end of turn %s was not estimated", processor.turn.message_id
        )
        return None


async def despite_cancels(work: Awaitable[None]) -> None:
    """Run an aborted turn's ending to its end, whatever cancels arrive meanwhile: a
    second cancel (two aborts at once) interrupted the awaits of the ending, and the
    reply stayed open for good while the lease was released."""
    ending = asyncio.ensure_future(work)
    while not ending.done():
        try:
            await asyncio.shield(ending)
        except asyncio.CancelledError:
            continue
    ending.result()


def _finalize(held: list[services.Write], **finalizing: Any) -> list[str]:
    """``finalize_open_messages`` after the writes the turn held (the finished parts of
    the step it was in), in one transaction. Held writes that are refused are
    logged and dropped: finalizing closes their parts from the streamed texts."""
    with transaction.atomic():
        if held:
            try:
                with transaction.atomic():
                    services.append_batch(session=finalizing["session"], writes=held)
            except ForgeError:
                logger.exception("the held writes of an ended turn were refused")
        return finalize_open_messages(**finalizing)


async def end_broken(turn: Turn, processor: Processor, exc: BaseException) -> None:
    """Finalize a turn that broke (an exception of the server or a plugin) from what
    it streamed; not when its lease is lost: the reply is then not this process's to
    finalize (:func:`end_aborted`)."""
    if not await turn.confirm_lease():
        return
    await processor.flush()
    texts = processor.streamed_texts()
    await db(_finalize)(
        processor.take_held(),
        session=turn.session,
        reason=f"the reply failed: {type(exc).__name__}",
        # The exception's text can name the server's insides (a Redis or
        # database address): clients get its kind, the log gets the rest.
        error=message_error(
            "UnknownError",
            f"the server failed while replying ({type(exc).__name__}); it has been logged",
        ),
        texts=texts,
        message_id=turn.message_id,
        agent=turn.agent.name,
    )
