"""The run loop: the steps of one turn, each from a fresh read of the store."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from forge.context import request_for
from forge.db.worker import db
from forge.errors import UnknownModel
from forge.providers import resolve
from forge.providers.base import Provider
from sessions import services
from sessions.log import format_time, now_ms

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
        for step in range(1, limit + 1):
            turn.raise_if_aborted()
            _, request = await finish_then_cancel(db(request_for)(session))
            result = await processor.run_step(provider.stream(request))
            total_cost += result.cost
            if result.error is not None:
                await _fail(turn, _error_info(result.error))
                return
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
                # The reply's completion and its entry in long-term memory: one unit.
                await finish_then_cancel(db(complete_reply)(turn, info))
                return
            await finish_then_cancel(db(services.update_message)(session=session, info=info))
    except asyncio.CancelledError:
        await asyncio.shield(
            db(finalize_open_messages)(
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
        texts = processor.streamed_texts()
        await db(finalize_open_messages)(
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
