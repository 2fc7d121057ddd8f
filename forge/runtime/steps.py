"""The run loop: the steps of one turn, each from a fresh read of the store.

:func:`run_turn` owns the turn's ending (normal, failed, aborted, broken: the
reply is never left open by accident); :func:`_steps` loops; :func:`_step` runs
one step and says what comes next; compaction and provider errors have their
own functions. A step that ends with calls awaiting approval *suspends* the
turn: its parts and the message update are written, the reply stays open, and
the turn returns (the runner releases the lease). The answer resumes it
(:class:`Resume`): the approved tool runs, then the next step, in whichever
process took the answer.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from django.db import connection

from forge import tools
from forge.context import request_for, steps_start
from forge.context.pruning import mark
from forge.db.worker import db
from forge.errors import CompactionFailed, NothingToCompact, UnknownModel
from forge.providers import resolve
from forge.providers.base import Provider
from forge.providers.events import Usage
from forge.telemetry import metrics, tracing
from forge.tools import ToolError
from sessions import selectors, services, sql, turn_sql
from sessions.log import format_time, now_ms
from sessions.models import Session

from .approvals.asking import approval_action
from .approvals.pending import waiting
from .compaction import (
    auto_enabled,
    compact,
    is_provider_overflow,
    over_limit,
    overflow_error,
)
from .dialogue import complete_reply
from .endings import despite_cancels, end_aborted, end_broken
from .finalize import finalize_open_messages, message_error
from .metering import StepResult
from .processor import Processor
from .prompting import Attachment, begin
from .shielding import finish_then_cancel
from .tool_calls import Call
from .turn import Turn

logger = logging.getLogger(__name__)


class Compaction(enum.Enum):
    """How compacting in the middle of a turn went."""

    COMPACTED = "compacted"  # go on from the compacted context
    NOTHING = "nothing"  # nothing to compact: go on as it is
    FAILED = "failed"  # the reply was ended with a ContextOverflowError


class Next(enum.Enum):
    """What follows a step."""

    STEP = "step"  # the model called tools: another step
    RETRY = "retry"  # the same step again (after compacting an overflow)
    DONE = "done"  # the reply is finished (or failed, or suspended)


@dataclass
class Resume:
    """An answered call the turn goes on from (``forge.runtime.approvals.services``)."""

    call_id: str
    part: dict[str, Any]  # the tool part as it waited
    approved: bool
    approval: dict[str, Any] = field(default_factory=dict)  # the logged answer


@dataclass
class _Loop:
    """What the steps of one turn share."""

    provider: Provider
    step: int = 1
    total_cost: float = 0.0
    usage: Usage | None = None
    retried_overflow: bool = False
    request: Any = None  # the first step's request, read with the turn's start (one hop)


def _error_info(error: Any) -> dict[str, Any]:
    return message_error(
        error.name,
        error.message,
        retryable=bool(error.retryable),
        status=getattr(error, "status", None),
    )


async def run_turn(turn: Turn, resume: list[Resume] | None = None) -> None:
    """:func:`_run_turn` in the turn's trace span; a fresh turn (not a resumed one) is
    counted in ``forge_turns_started``."""
    if resume is None:
        metrics.TURNS_STARTED.labels(agent=turn.agent.name, model=turn.model).inc()
    with tracing.turn_span(
        session_id=turn.session.pk,
        message_id=turn.message_id,
        agent=turn.agent.name,
        model=turn.model,
        resumed=resume is not None,
    ):
        await _run_turn(turn, resume)


async def _run_turn(turn: Turn, resume: list[Resume] | None = None) -> None:
    """Loop over steps while the model calls tools, up to the agent's step limit.

    Ends with the assistant message completed: normally (``finish`` of the last
    step, its tokens, the cost of all steps), with the provider's error, or —
    when cancelled (abort) or broken — finalized so nothing stays open; or
    suspended, open, while calls await approval. ``resume``: go on from the
    answered calls (logged together) instead of starting.
    """
    session = turn.session
    processor = Processor(turn)
    provider: Provider | None = None
    try:
        if turn.abort.is_set():  # stopped as it started (``runner._stop``): nothing ran
            raise asyncio.CancelledError
        await services.apublish_status(session_id=session.pk, status="busy")
        try:
            provider = resolve(turn.model)
        except UnknownModel as exc:
            await _fail(turn, message_error("ProviderError", str(exc)))
            return
        loop = _Loop(provider=provider)
        if resume is not None and not await _resume(turn, processor, resume, loop):
            return  # suspended again, or completed at the step limit
        # Prune, the last step's usage (this turn's, or before), and the first step's
        # request, read after the pruning: read with the prompt (``begin_turn``), or here
        # in one hop to the database thread.
        first, turn.first_step = turn.first_step, None
        if resume is not None or first is None:
            started: tuple[Any, Any] = await finish_then_cancel(db(_start_steps)(session))
            first = started
        loop.usage, loop.request = first
        await _steps(turn, processor, loop)
    except asyncio.CancelledError:
        await despite_cancels(end_aborted(turn, processor))
        raise
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        # SystemExit and KeyboardInterrupt too, raised by a plugin (a hook, a provider):
        # past this, they reached the event loop, which stopped serving.
        logger.exception("turn of session %s failed", session.pk)
        await end_broken(turn, processor, exc)
    finally:
        # Ended (completed, failed, aborted or suspended): an abort from now on is not to
        # cancel this clean-up, nor the runner's (``runner._stop``). A late one cancelled
        # it, the provider's pool left open (review); ``abort_turn`` ends a reply left
        # open, waiting.
        turn.running = False
        await asyncio.shield(processor.forget())
        close = getattr(provider, "aclose", None)  # providers holding a connection pool
        if close is not None:
            await asyncio.shield(close())


async def _steps(turn: Turn, processor: Processor, loop: _Loop) -> None:
    limit = max(1, turn.agent.step_limit)
    while loop.step <= limit:
        turn.raise_if_aborted()
        next_ = await _step(turn, processor, loop, last=loop.step == limit)
        if next_ is Next.DONE:
            return
        if next_ is Next.STEP:
            loop.step += 1


async def _request(turn: Turn, loop: _Loop) -> Any:
    """The step's request, compacted first when it is over the model's limit; None
    when the reply was ended instead."""
    session = turn.session
    request, loop.request = loop.request, None
    if request is None:
        _, request = await finish_then_cancel(db(request_for)(session))
    if over_limit(request, model=turn.model, agent=turn.agent, usage=loop.usage):
        outcome = await _compact_or_fail(turn, "the context is over the model's limit")
        if outcome is Compaction.FAILED:
            return None
        if outcome is Compaction.COMPACTED:
            loop.usage = None
            _, request = await finish_then_cancel(db(request_for)(session))
    return request


async def _step(turn: Turn, processor: Processor, loop: _Loop, *, last: bool) -> Next:
    """One step: the model's stream processed, then the reply's message updated."""
    request = await _request(turn, loop)
    if request is None:
        return Next.DONE
    provider, _, model = turn.model.partition("/")
    if request.model != model:
        # The request's model is the log's ``settings`` block's, which an import writes as
        # it likes: a reply resumed by an answer sent the provider that name (QA). A
        # prompt's turn logged its own model there; the turn's model is the one called.
        request = replace(request, model=model)
    with (
        tracing.span(f"step {loop.step}", forge__step=loop.step),
        tracing.model_call(provider=provider, model=model, messages=request.messages) as call,
    ):
        processor.step_texts.clear()
        processor.meter.request = request  # what a cut step bills (estimated then)
        result = await processor.run_step(loop.provider.stream(request))
        tracing.model_result(
            call,
            input_tokens=result.usage.input,
            output_tokens=result.usage.output,
            finish_reason=result.finish_reason,
            error=result.error.name if result.error is not None else None,
            output="\n".join(processor.step_texts) if processor.step_texts else None,
        )
    loop.total_cost += result.cost
    if result.error is not None:
        processor.drop_bare_step_start()
        await processor.write()  # what the failed step held, before anything else
        return await _step_failed(turn, result, loop)
    loop.usage = result.usage
    info: dict[str, Any] = {
        "id": turn.message_id,
        "tokens": result.usage.as_tokens(),
        "cost": round(loop.total_cost, 10),
        "finish": result.finish_reason,
    }
    if processor.awaiting:
        # Calls wait for an answer: the step's parts and the message update are
        # written, the reply stays open, and the turn suspends.
        processor.awaiting.clear()
        await processor.write(services.UpdateMessage(info=info))
        return Next.DONE
    if result.finish_reason != "tool-calls" or last:
        await _complete(turn, processor, info)
        return Next.DONE
    await processor.write(services.UpdateMessage(info=info))  # with the step's parts
    return Next.STEP


async def _complete(turn: Turn, processor: Processor, info: dict[str, Any]) -> None:
    """The step's held parts, the reply's completion and its entry in long-term
    memory: one unit."""
    if info.get("finish") == "tool-calls":
        info["finish"] = "step-limit"
    info["completed_at"] = format_time(now_ms())
    await processor.write(unit=partial(complete_reply, turn, info))


async def _step_failed(turn: Turn, result: StepResult, loop: _Loop) -> Next:
    """A provider error: an overflow is compacted and the step tried again (once);
    anything else ends the reply with the error."""
    assert result.error is not None
    if not is_provider_overflow(result.error):
        await _fail(turn, _error_info(result.error))
        return Next.DONE
    message = f"the model's context window overflowed: {result.error.message}"
    outcome = Compaction.NOTHING
    if not loop.retried_overflow:
        outcome = await _compact_or_fail(turn, message)
        if outcome is Compaction.FAILED:
            return Next.DONE
    if outcome is Compaction.COMPACTED:
        loop.retried_overflow = True
        loop.usage = None
        return Next.RETRY
    await _fail(turn, overflow_error(message))
    return Next.DONE


# --- resuming after an answer ----------------------------------------------------


async def _resume(turn: Turn, processor: Processor, resume: list[Resume], loop: _Loop) -> bool:
    """Run the approved calls, one after the other (a denied one was logged already),
    then go on: True when the next step follows, False when calls of the reply still
    wait (suspended again) or the reply was completed at its step limit."""
    for answered in resume:
        if answered.approved:
            # As between a step's own calls (``run_deferred``): a tool that swallowed the
            # abort's cancellation must not let the next approved call run (QA).
            turn.raise_if_aborted()
            await _run_approved(turn, processor, answered)
    if await db(_still_waiting)(turn):
        return False
    steps_done, cost = await db(_steps_done)(turn)
    loop.step, loop.total_cost = steps_done + 1, cost
    if steps_done >= max(1, turn.agent.step_limit):
        await _complete(turn, processor, {"id": turn.message_id, "finish": "tool-calls"})
        return False
    return True


async def _run_approved(turn: Turn, processor: Processor, resume: Resume) -> None:
    part = resume.part
    state = part["state"]
    args = state.get("input", {})
    call = Call(
        part_id=part["id"],
        tool=part["tool"],
        start=state.get("time", {}).get("start"),
        input=args,
        status="running",
        metadata={"approval": resume.approval},
    )
    try:
        tool, args = tools.prepare_call(
            part["tool"],
            json.dumps(args),
            turn.agent.tools or None,
            await processor.tools_for(part["tool"]),
        )
    except ToolError as exc:
        await processor.tool_error(resume.call_id, call, exc, args=args)
        return
    if approval_action(turn.agent, tool.name, args) == "deny":
        # The rules in force now hold, however the call came to wait: a rule turned to
        # ``deny`` while it waited, or an imported log's call renamed to a denied tool
        # (QA, HIGH: an approval ran list_files under a "list_files": "deny" rule).
        denied = ToolError("denied by an approval rule", metadata={"denied": True})
        await processor.tool_error(resume.call_id, call, denied, args=args)
        return
    await processor.run_with_patch(lambda: processor.run_tool(resume.call_id, call, tool, args))


def _still_waiting(turn: Turn) -> bool:
    return bool(
        waiting(tenant=turn.session.tenant, session=turn.session, message_id=turn.message_id)
    )


def _steps_done(turn: Turn) -> tuple[int, float]:
    """How many steps the reply has finished, and their cost."""
    item = selectors.get_message(
        tenant=turn.session.tenant, session_id=turn.session.pk, message_id=turn.message_id
    )
    finished = [p for p in item["parts"] if p["type"] == "step-finish"]
    return len(finished), float(item["info"].get("cost") or 0.0)


def begin_turn(
    session: Session,
    text: Any,
    agent_name: Any,
    files: Sequence[Attachment],
    depth: int = 0,
    speaker: Any = None,
    *,
    mcp_listing: Any = None,
) -> tuple[Turn, dict[str, Any]]:
    """``prompting.begin``, then the first step's start read in the same hop to the
    database thread (``Turn.first_step``): one hop less per turn. The prompt is
    committed first; a failure to read the start leaves it to the run loop, which
    reads it again (and finalizes the reply if that fails too)."""
    turn, user_message = begin(
        session, text, agent_name, files, depth, speaker, mcp_listing=mcp_listing
    )
    try:
        turn.first_step = _start_steps(turn.session)
    except Exception:
        logger.exception("session %s: the first step's start is read again", session.pk)
    return turn, user_message


def _start_steps(session: Any) -> tuple[Usage | None, Any]:
    """What the steps start from, in one unit on the database thread: prune, then the
    last step's usage and the first step's request (read with pruning's choice, from
    one catch-up of the context cache; again after marking, when pruning marked)."""
    chosen, (_, request) = steps_start(session)
    if mark(session, chosen):
        request = request_for(session)[1]
    return _last_usage(session), request


def _last_usage(session: Any) -> Usage | None:
    """The last step's usage, unless the model's view changed since: a compaction, or a
    new ``dialog_history`` block (a rolling trims what the model is sent: the old usage
    would overstate it, and compact a context that no longer needs it)."""
    with connection.cursor() as cursor:  # before every step: one plain statement
        tokens = turn_sql.last_step_tokens(
            cursor,
            sql.Dialect(cursor),
            tenant_id=session.tenant_id,
            session_id=session.pk,
            stale_after_blocks=("dialog_history",),
        )
    if not tokens:
        return None
    return Usage(input=int(tokens.get("input", 0)), output=int(tokens.get("output", 0)))


async def _compact_or_fail(turn: Turn, why: str) -> Compaction:
    """Compact in the middle of the turn (its prompt stays in the kept tail).

    ``NOTHING`` when there is nothing to compact (no progress since the last
    boundary, or nothing older than this turn); ``FAILED`` when the reply was
    ended with a ``ContextOverflowError`` (automatic compaction off, or the
    summary failed)."""
    if not auto_enabled(turn.agent):
        await _fail(turn, overflow_error(f"{why}, and automatic compaction is off"))
        return Compaction.FAILED
    try:
        await compact(
            turn.session,
            auto=True,
            overflow=True,
            agent=turn.agent.name,
            keep_from=turn.user_message_id,
            # The turn's speaker pays for it, as for the turn's replies (it was the
            # owner's: a teammate's turns spent on the owner's budget; QA).
            speaker_id=None if turn.speaker is None else int(str(turn.speaker.pk)),
        )
    except NothingToCompact as exc:
        logger.info("session %s: not compacted: %s", turn.session.pk, exc)
        return Compaction.NOTHING
    except CompactionFailed as exc:
        await _fail(turn, overflow_error(f"{why}, and compacting it failed: {exc}"))
        return Compaction.FAILED
    return Compaction.COMPACTED


async def _fail(turn: Turn, error: dict[str, Any]) -> None:
    """End the reply with ``error``; parts the failed step left open are closed, and
    calls of the step that wait for approval denied: the reply they would go on is
    over (left waiting, the reply stayed suspended and the error unlogged; QA)."""
    tracing.turn_failed(str(error.get("name") or "Error"), str(error.get("message") or ""))
    reason = "the model's reply ended with an error"
    await finish_then_cancel(
        db(finalize_open_messages)(
            session=turn.session,
            reason=reason,
            error=error,
            message_id=turn.message_id,
            agent=turn.agent.name,
            deny_waiting=reason,
        )
    )
