"""The run loop: the steps of one turn, each from a fresh read of the store."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from django.db import transaction

from forge.context import request_for, visible_history
from forge.context.pruning import prune
from forge.db.worker import db
from forge.errors import CompactionFailed, ForgeError, NothingToCompact, UnknownModel
from forge.providers import resolve
from forge.providers.base import Provider
from forge.providers.events import Usage
from sessions import selectors, services
from sessions.log import format_time, now_ms

from .compaction import auto_enabled, compact, is_provider_overflow, over_limit, overflow_error
from .dialogue import complete_reply
from .finalize import ABORTED, finalize_open_messages
from .processor import Processor, finish_then_cancel
from .turn import Turn

logger = logging.getLogger(__name__)


def _error_info(error: Any) -> dict[str, Any]:
    info = {"name": error.name, "message": error.message, "retryable": bool(error.retryable)}
    if getattr(error, "status", None) is not None:
        info["status"] = error.status
    return info


async def run_turn(turn: Turn) -> None:
    """Loop over steps while the model calls tools, up to the agent's step limit.

    Ends with the assistant message completed: normally (``finish`` of the last
    step, its tokens, the cost of all steps), with the provider's error, or —
    when cancelled (abort) or broken — finalized so nothing stays open.
    """
    session = turn.session
    processor = Processor(turn)
    provider: Provider | None = None
    await services.apublish_status(session_id=session.pk, status="busy")
    try:
        try:
            provider = resolve(turn.model)
        except UnknownModel as exc:
            await _fail(turn, {"name": "ProviderError", "message": str(exc), "retryable": False})
            return
        total_cost = 0.0
        limit = max(1, turn.agent.step_limit)
        await finish_then_cancel(db(_prune)(session))
        usage = await db(_last_usage)(session)  # the last step's (this turn's, or before)
        step = 1
        retried_overflow = False
        while step <= limit:
            turn.raise_if_aborted()
            _, request = await finish_then_cancel(db(request_for)(session))
            if over_limit(request, model=turn.model, agent=turn.agent, usage=usage):
                outcome = await _compact_or_fail(turn, "the context is over the model's limit")
                if outcome is None:
                    return
                if outcome:
                    usage = None
                    _, request = await finish_then_cancel(db(request_for)(session))
            result = await processor.run_step(provider.stream(request))
            total_cost += result.cost
            if result.error is not None:
                await processor.write()  # what the failed step held, before anything else
                if is_provider_overflow(result.error):
                    message = f"the model's context window overflowed: {result.error.message}"
                    outcome = False
                    if not retried_overflow:
                        outcome = await _compact_or_fail(turn, message)
                        if outcome is None:
                            return
                    if outcome:
                        retried_overflow = True
                        usage = None
                        continue  # the same step again, from the compacted context
                    await _fail(turn, overflow_error(message))
                    return
                await _fail(turn, _error_info(result.error))
                return
            usage = result.usage
            final = result.finish_reason != "tool-calls" or step == limit
            info: dict[str, Any] = {
                "id": turn.message_id,
                "tokens": result.usage.as_tokens(),
                "cost": round(total_cost, 10),
                "finish": result.finish_reason,
            }
            if final:
                if result.finish_reason == "tool-calls":
                    info["finish"] = "step-limit"
                info["completed_at"] = format_time(now_ms())
            if final:
                # The step's held parts, the reply's completion and its entry in
                # long-term memory: one unit.
                await processor.write(unit=partial(complete_reply, turn, info))
                return
            await processor.write(services.UpdateMessage(info=info))  # with the step's parts
            step += 1
    except asyncio.CancelledError:
        # What is still in the delta window reaches clients before the reply is
        # finalized with the buffer's text: the stored text is exactly what they saw.
        await asyncio.shield(processor.flush())
        await asyncio.shield(
            db(_finalize)(
                processor.take_held(),
                session=session,
                reason=ABORTED,
                texts=processor.streamed_texts(),
                message_id=turn.message_id,
                agent=turn.agent.name,
            )
        )
        raise
    except Exception as exc:
        logger.exception("turn of session %s failed", session.pk)
        await processor.flush()
        texts = processor.streamed_texts()
        await db(_finalize)(
            processor.take_held(),
            session=session,
            reason=f"the reply failed: {type(exc).__name__}",
            error={
                "name": "UnknownError",
                # The exception's text can name the server's insides (a Redis or
                # database address): clients get its kind, the log gets the rest.
                "message": f"the server failed while replying ({type(exc).__name__}); "
                "it has been logged",
                "retryable": False,
            },
            texts=texts,
            message_id=turn.message_id,
            agent=turn.agent.name,
        )
    finally:
        await asyncio.shield(processor.forget())
        close = getattr(provider, "aclose", None)  # providers holding a connection pool
        if close is not None:
            await asyncio.shield(close())


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


def _prune(session: Any) -> None:
    prune(session, visible_history(session))


def _last_usage(session: Any) -> Usage | None:
    """The last step's usage, unless the model's view changed since: a compaction, or a
    new ``dialog_history`` block (a rolling trims what the model is sent: the old usage
    would overstate it, and compact a context that no longer needs it)."""
    tokens = selectors.last_step_tokens(
        tenant=session.tenant, session=session, stale_after_blocks=("dialog_history",)
    )
    if not tokens:
        return None
    return Usage(input=int(tokens.get("input", 0)), output=int(tokens.get("output", 0)))


async def _compact_or_fail(turn: Turn, why: str) -> bool | None:
    """Compact in the middle of the turn (its prompt stays in the kept tail).

    True: compacted; False: nothing to compact (no progress since the last
    boundary, or nothing older than this turn), go on; None: the reply was
    ended with a ``ContextOverflowError`` (automatic compaction off, or the
    summary failed)."""
    if not auto_enabled(turn.agent):
        await _fail(turn, overflow_error(f"{why}, and automatic compaction is off"))
        return None
    try:
        await compact(
            turn.session,
            auto=True,
            overflow=True,
            agent=turn.agent.name,
            keep_from=turn.user_message_id,
        )
    except NothingToCompact as exc:
        logger.info("session %s: not compacted: %s", turn.session.pk, exc)
        return False
    except CompactionFailed as exc:
        await _fail(turn, overflow_error(f"{why}, and compacting it failed: {exc}"))
        return None
    return True


async def _fail(turn: Turn, error: dict[str, Any]) -> None:
    """End the reply with ``error``; parts the failed step left open are closed."""
    await finish_then_cancel(
        db(finalize_open_messages)(
            session=turn.session,
            reason="the model's reply ended with an error",
            error=error,
            message_id=turn.message_id,
            agent=turn.agent.name,
        )
    )
