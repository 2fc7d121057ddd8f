"""The Processor: one step's stream in, the log and the bus out (CONTRACT §2).

| stream event                     | log + projection                         | bus         |
| -------------------------------- | ---------------------------------------- | ----------- |
| text-start / reasoning-start     | a new, empty part                        | yes         |
| text-delta / reasoning-delta     | no                                       | part.delta  |
| text-end / reasoning-end         | the whole part (trimmed, hook applied)   | yes         |
| tool-input-start                 | the tool part, ``pending``               | yes         |
| tool-input deltas                | no                                       | no          |
| tool-call                        | ``running``, with the step-finish; once   | yes         |
|                                  | the stream ended, ``completed``/``error`` |             |
| start-step / finish-step         | step-start / step-finish part            | yes         |
| (after a step that changed files) | a patch part                            | yes         |

A model's NUL characters (U+0000) and lone UTF-16 surrogates (half an emoji from a
JavaScript server; no UTF-8 text can hold one, so the event's hash, the frame and
the row would each fail) become U+FFFD as they arrive, in every string of the
stream but a tool call's raw input, where only raw lone surrogates are replaced
(``ev.event_without_nul``): the log stores neither, and holds exactly what clients
were sent. A tool call whose input or result holds one ends in a tool error
(``forge.tools``); the reply goes on.

Deltas are kept in the in-flight buffer at once (for snapshots, and for
finalizing an aborted reply) and published in short time windows
(``forge.runtime.deltas``), each frame with the offset of its first character;
the window is flushed before every batch of writes, so frames and events keep
the model's order.

Writes are batched (``services.append_batch``), one transaction per batch, run
off the event loop. A finished text or reasoning part is finished work: it is
written at its end (``text-end`` / ``reasoning-end``), so a process killed
right after keeps it whole, with or without the Redis mirror. One exception
costs no durability: when the step's ``finish-step`` is already in hand at the
block's end (read ahead with one turn of the event loop, never a wait on the
model: :class:`ReadAhead`), nothing is left to wait for, and the block goes in
the transaction that ends the step, a moment later. Only the step's
bookkeeping is *held*: the step-start, the step-finish, the patch. Held writes
go with the next write that must be seen now (a part opening or end, a tool's
state) or with the message update that ends the step (:meth:`Processor.write`),
so a one-text step costs three transactions (its opening with the step-start,
its end, the step-finish with the message update).

**A tool runs once the model's call is over.** An allowed call's ``running`` state
is made at the model's ``tool-call`` but kept apart from what is held (another write
of the step, a block's end, must not carry it); the step's ``finish-step`` (the
call's usage) follows, the stream is closed, and then one transaction writes the
running states with the step-finish before the first tool runs. A process killed
while a tool runs thus leaves the model call's tokens and cost in the log, and the
dead turn's usage counts them (a tool that runs a minute used to hold them back,
with the provider's connection open). The step-finish's ``snapshot`` is the
workspace after the step, as before: when the calls changed files, an update of
the step-finish with the new hash goes with the ``patch`` that names them. Each still is its own
event and frame, in the order it happened; a finished part's buffer (its
snapshot, and the text recovery falls back on) is dropped only once its write
committed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from forge import hooks, tools
from forge.db.worker import db
from forge.providers import events as ev
from forge.telemetry import metrics, tracing
from sessions import services
from sessions.ids import new_part_id
from sessions.log import format_time, now_ms

from .deltas import DeltaWindow
from .inflight import buffer, mirror
from .metering import StepMeter, StepResult
from .model_calls import failure_kind, price, provider_of
from .patches import Patches
from .readahead import ReadAhead
from .shielding import finish_then_cancel
from .tool_calls import Call, Deferred, ToolCalls
from .turn import Turn


@dataclass
class _Block:
    part_id: str
    kind: str  # "text" | "reasoning"
    start: str


@dataclass(frozen=True)
class _StepEnd:
    """The step-finish held or written for the current step: its part, and the
    workspace's hash it names."""

    part_id: str
    hash: str


class Processor(ToolCalls, Patches):
    """Processes the steps of one turn. Keeps only what the current step needs."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.blocks: dict[str, _Block] = {}
        self.calls: dict[str, Call] = {}
        self.awaiting: list[str] = []  # calls of this step logged awaiting-approval
        self.deferred: list[Deferred] = []  # allowed calls, run once the step ends
        self.running: list[services.Write] = []  # their running states, held at the step's end
        self.step_end: _StepEnd | None = None  # the current step's step-finish, once held
        self.snapshot_before: tools.Snapshot | None = None
        # The step in flight: what an aborted step bills (:meth:`cut_step_end`); the
        # loop sets its ``request`` before the model is asked.
        self.meter = StepMeter()
        # Whether a retry was announced (``retry``) and no event came after it yet: the
        # next one announces ``busy`` again, or the status said "retrying" for the rest
        # of the reply (QA).
        self.retrying = False
        self.held: list[services.Write] = []  # bookkeeping written with the next write
        self.finished: list[str] = []  # parts whose buffers go once their write is in
        self.window = DeltaWindow(
            session=turn.session,
            message_id=turn.message_id,
            holds=turn.holds_lease,
            confirm=turn.confirm_lease,
        )
        self.mcp_tools: dict[str, tools.Tool] | None = None  # the agent's MCP tools
        # The model's call ids as logged (:meth:`_call_id`): the ids this turn used, and
        # per id the calls opened under it and not yet called, first opened first.
        self.used_call_ids: set[str] = set()
        self.opened_calls: dict[str, deque[str]] = {}
        # The texts the current step finished, kept only while traces capture content.
        self.step_texts: list[str] = []

    def _call_id(self, given: str, *, opening: bool = False) -> str:
        """The id a tool call is logged under: the model's, unless this turn used it
        already or it is empty; then the model's with a suffix (``x1_2``). A model that
        gave two calls of one step the same id made one call's answer run the other,
        and the model could not tell their results apart. A call's start and its call
        name the same logged id (per model id, the first opened is the first called)."""
        queue = self.opened_calls.setdefault(given, deque())
        if not opening and queue:
            return queue.popleft()
        logged, n = given, 1
        while not logged or logged in self.used_call_ids:
            n += 1
            logged = f"{given or 'call'}_{n}"
        self.used_call_ids.add(logged)
        if opening:
            queue.append(logged)
        return logged

    # --- writes -------------------------------------------------------------------

    async def write(
        self,
        *writes: services.Write,
        unit: Callable[[list[services.Write]], Any] | None = None,
    ) -> Any:
        """Write what is held, then ``writes``, as one batch (one transaction).

        ``unit`` (run on the database thread with the whole batch) appends it
        together with other work of the same transaction; by default the batch
        alone. A write that failed is not tried again: what it held of finished
        text stays in the buffers, for finalizing.
        """
        if not await self.turn.confirm_lease():  # another process may be finalizing it
            raise asyncio.CancelledError
        batch, self.held = [*self.held, *writes], []
        if not batch and unit is None:  # a unit (the reply's completion) runs regardless
            return None
        # What streamed before these writes reaches clients before their events, and the
        # mirror before a finished part's keys are dropped.
        await self.window.flush()
        if unit is None:
            work = db(services.append_batch)(session=self.turn.session, writes=batch)
        else:
            work = db(unit)(batch)
        began = time.monotonic()
        result = await finish_then_cancel(work)
        metrics.APPEND_SECONDS.observe(time.monotonic() - began)
        finished, self.finished = self.finished, []
        for part_id in finished:
            await self._forget(part_id)
        return result

    def take_held(self) -> list[services.Write]:
        """The held writes, handed over (for finalizing an aborted reply with them), with
        the running states of calls the step had not ended yet (finalizing ends them
        interrupted, with their input)."""
        held, self.held, self.running = [*self.held, *self.running], [], []
        return held

    def drop_bare_step_start(self) -> None:
        """Forget the step's held step-start when nothing else of the step was written
        (a held write goes with the step's first one): a step that failed before it
        produced anything is not logged. Else an overflow's retry left a step-start
        with no step-finish beside its own (QA)."""
        match self.held:
            case [services.UpdatePart(part={"type": "step-start"})]:
                self.held.clear()

    async def _part(self, part: dict[str, Any]) -> None:
        """Write a part now (with what is held before it)."""
        await self.write(services.UpdatePart(part=part))

    def _hold(self, part: dict[str, Any]) -> None:
        """Hold a part's write for the next batch. A new part gets its id now: parts
        are ordered by id, which must be the order they happened in."""
        if "id" not in part:
            part = {"id": new_part_id(), **part}
        self.held.append(services.UpdatePart(part=part))

    def _now(self) -> str:
        return format_time(now_ms())

    # --- the step -------------------------------------------------------------------

    async def run_step(self, stream: AsyncIterator[ev.StreamEvent]) -> StepResult:
        """Consume one step's stream; return how it finished."""
        self.meter.begin()
        try:
            result = await self._consume(stream)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:  # the provider's stream (and its connection) ends with the step
                await close()
        if result is None:  # the stream ended without finishing the step
            self.meter.pause()  # broken off: billed nothing, even cut now
            await self.close_open_blocks()
            self._hold_unfinished_calls()
            result = StepResult(
                "error",
                ev.Usage(),
                0.0,
                error=ev.Error(name="ProviderError", message="the model's stream ended early"),
            )
        if result.error is not None:
            # A step the provider refused or broke off bills nothing (docs/operations.md):
            # an abort before the next step (a compaction after an overflow, the retry)
            # billed the refused request, as a step-finish with no step-start (review).
            self.meter.close()
            self._hold_unrun_calls()
        elif self.deferred:  # the model's call is over (its stream closed): the tools run
            await self.run_deferred()
            after = await self._workspace()
            if self.step_end is not None and after.hash != self.step_end.hash:
                # The step's snapshot is the workspace after its calls, as without them.
                self.held.append(
                    services.UpdatePart(part={"id": self.step_end.part_id, "snapshot": after.hash})
                )
            self._hold_patch(self.snapshot_before, after)
        return result

    async def _consume(self, stream: AsyncIterator[ev.StreamEvent]) -> StepResult | None:
        events = ReadAhead(stream)
        try:
            return await self._dispatch(events)
        finally:
            await events.settle()  # no fetch left running when the stream is closed

    async def _dispatch(self, events: ReadAhead) -> StepResult | None:
        turn = self.turn
        result: StepResult | None = None
        while (raw := await events.next()) is not None:
            turn.raise_if_aborted()
            event = ev.event_without_nul(raw)  # the log stores no NUL: U+FFFD, as streamed
            if self.retrying and not isinstance(event, ev.Retry | ev.Error):
                self.retrying = False
                self.meter.resume()
                await services.apublish_status(session_id=turn.session.pk, status="busy")
            if isinstance(event, ev.TextDelta | ev.ReasoningDelta):
                await self._delta(event)
            elif isinstance(event, ev.TextStart | ev.ReasoningStart):
                await self._open(
                    event.id, "text" if isinstance(event, ev.TextStart) else "reasoning"
                )
            elif isinstance(event, ev.TextEnd | ev.ReasoningEnd):
                await self._close(event.id, with_step_end=await events.step_ends_now())
            elif isinstance(event, ev.ToolInputDelta):
                self.meter.input_delta(event.call_id, len(event.delta))
            elif isinstance(event, ev.ToolInputStart):
                self.meter.calls += 1
                await self._pending(self._call_id(event.call_id, opening=True), event.tool)
            elif isinstance(event, ev.ToolCall):
                self.meter.call(event.call_id, len(event.input))
                await self._call(replace(event, call_id=self._call_id(event.call_id)))
            elif isinstance(event, ev.StartStep):
                await self._start_step()
            elif isinstance(event, ev.FinishStep):
                result = await self._finish_step(event)
                break
            elif isinstance(event, ev.Retry):
                metrics.PROVIDER_RETRIES.labels(
                    provider=provider_of(turn.model), kind=failure_kind(event.message)
                ).inc()
                self.retrying = True
                self.meter.pause()  # a request being retried is not served (yet)
                await services.apublish_status(
                    session_id=turn.session.pk,
                    status="retry",
                    attempt=event.attempt,
                    next_at=event.next_at,
                )
            elif isinstance(event, ev.Error):
                self.meter.pause()  # refused or broken off: billed nothing, even cut now
                metrics.PROVIDER_ERRORS.labels(
                    provider=provider_of(turn.model), kind=failure_kind(event.message)
                ).inc()
                await self.close_open_blocks()
                self._hold_unfinished_calls()
                result = StepResult("error", ev.Usage(), 0.0, error=event)
                break
            # tool-input deltas and ends: neither written nor published.
        return result

    async def _open(self, block_id: str, kind: str) -> _Block:
        turn = self.turn
        block = _Block(part_id=new_part_id(), kind=kind, start=self._now())
        self.blocks[block_id] = block
        buffer.open(session_id=turn.session.pk, message_id=turn.message_id, part_id=block.part_id)
        shared = mirror()
        if shared is not None and await turn.confirm_lease():
            await shared.open(
                session_id=turn.session.pk,
                message_id=turn.message_id,
                part_id=block.part_id,
                field="text",
            )
        await self._part(
            {
                "id": block.part_id,
                "message_id": turn.message_id,
                "type": kind,
                "text": "",
                "time": {"start": block.start},
            }
        )
        return block

    async def _delta(self, event: ev.TextDelta | ev.ReasoningDelta) -> None:
        block = self.blocks.get(event.id)
        if block is None:  # a provider that skipped the start event
            block = await self._open(
                event.id, "text" if isinstance(event, ev.TextDelta) else "reasoning"
            )
        if not event.delta:
            return
        turn = self.turn
        if turn.first_delta_at is None:
            turn.first_delta_at = time.monotonic()
            metrics.FIRST_DELTA_SECONDS.labels(agent=turn.agent.name, model=turn.model).observe(
                turn.first_delta_at - turn.started_at
            )
        offset = buffer.append(block.part_id, event.delta)
        await self.window.add(block.part_id, offset, event.delta)

    async def _close(self, block_id: str, *, with_step_end: bool = False) -> None:
        """Write a finished block whole. ``with_step_end``: the step's end is already
        in hand (no wait on the model), so the block goes in the transaction that ends
        the step, a moment later, instead of one of its own."""
        block = self.blocks.pop(block_id, None)
        if block is None:
            return
        text = buffer.text(block.part_id).rstrip()
        if block.kind == "text":
            text = hooks.text_complete(
                text,
                hooks.TextContext(
                    session_id=self.turn.session.pk,
                    message_id=self.turn.message_id,
                    part_id=block.part_id,
                    agent=self.turn.agent.name,
                ),
            )
            text = ev.without_nul(text)  # a hook's NUL too: the log stores none
        # Written now, not held (unless the step's end is in hand): a finished block
        # must survive a kill -9 while the model goes on.
        # Its buffer (and mirror keys) go once the write is in (:meth:`write`); a write
        # that fails leaves them for finalizing.
        self.finished.append(block.part_id)
        self.meter.output_chars += len(text)
        if block.kind == "text" and tracing.capturing_content():
            self.step_texts.append(text)  # the completion, for the model call's span
        part = {
            "id": block.part_id,
            "text": text,
            "time": {"start": block.start, "end": self._now()},
        }
        if with_step_end:
            self.held.append(services.UpdatePart(part=part))
        else:
            await self._part(part)

    async def close_open_blocks(self) -> None:
        for block_id in list(self.blocks):
            await self._close(block_id)

    def cut_step_end(self, estimate: Callable[[Any], int]) -> dict[str, Any] | None:
        """The end of a step the model was serving when the turn was stopped, or None:
        a ``step-finish`` of reason ``aborted``, its tokens what :meth:`StepMeter.cut`
        bills (None for a step not open: ``forge.runtime.metering``). Finalizing logs it
        after the step's open parts are closed (``finalize_open_messages``): a client's
        step ends after its text."""
        streaming = sum(len(buffer.text(block.part_id)) for block in self.blocks.values())
        usage = self.meter.cut(estimate, streaming=streaming)
        if usage is None:
            return None
        return {
            "id": new_part_id(),
            "message_id": self.turn.message_id,
            "type": "step-finish",
            "reason": "aborted",
            "snapshot": self.snapshot_before.hash if self.snapshot_before else None,
            "tokens": usage.as_tokens(),
            "cost": price(self.turn.model, usage),
        }

    def streamed_texts(self) -> dict[str, str]:
        """The text streamed so far of every part still open or whose finished write is
        not in the log yet (for finalizing an abort)."""
        part_ids = [*self.finished, *(block.part_id for block in self.blocks.values())]
        return {part_id: buffer.text(part_id) for part_id in part_ids}

    async def _forget(self, part_id: str) -> None:
        buffer.close(part_id)
        shared = mirror()
        if shared is not None:
            await shared.close(session_id=self.turn.session.pk, part_id=part_id)

    async def flush(self) -> None:
        """Publish the deltas still in the window (before finalizing an abort or a failure,
        so the stored text is what clients were sent)."""
        await self.window.flush()

    async def forget(self) -> None:
        """Drop what is buffered of the parts still open (once they are finalized).
        A turn that lost its lease drops this process's buffers only: the mirror is
        what the lease's next holder finalizes the reply from."""
        if not await self.turn.confirm_lease():
            self.window.take()
            for part_id in [*self.finished, *(b.part_id for b in self.blocks.values())]:
                buffer.close(part_id)
            self.finished = []
            self.blocks.clear()
            return
        await self.window.flush()  # nothing may reach the mirror after its keys are gone
        finished, self.finished = self.finished, []
        for part_id in [*finished, *(block.part_id for block in self.blocks.values())]:
            await self._forget(part_id)
        self.blocks.clear()

    # --- steps --------------------------------------------------------------------

    async def _start_step(self) -> None:
        self.snapshot_before = await self._workspace()
        self._hold(
            {
                "message_id": self.turn.message_id,
                "type": "step-start",
                "snapshot": self.snapshot_before.hash,
            }
        )
        self.meter.start()  # open once its step-start is held

    async def _finish_step(self, event: ev.FinishStep) -> StepResult:
        turn = self.turn
        reason = event.finish_reason
        self.meter.usage = event.usage  # a cut from here on bills the provider's count
        if reason == "tool-calls" and not self.meter.calls:
            # A step that asked for calls and made none (a server whose tool-call parser
            # failed) has nothing new for a next step: going on repeated the same
            # request until the step limit (QA).
            reason = "other"
        for block_id in list(self.blocks):  # the step's end is in hand: held, not written
            await self._close(block_id, with_step_end=True)
        self._hold_unfinished_calls()
        # The calls' running states go with the step-finish, in one transaction.
        self.held.extend(self.running)
        self.running = []
        after = await self._workspace()
        cost = price(turn.model, event.usage)
        self.meter.close()
        self.step_end = _StepEnd(part_id=new_part_id(), hash=after.hash)
        self._hold(
            {
                "id": self.step_end.part_id,
                "message_id": turn.message_id,
                "type": "step-finish",
                "reason": reason,
                "snapshot": after.hash,
                "tokens": event.usage.as_tokens(),
                "cost": cost,
            }
        )
        if not self.deferred:  # else the patch follows the calls (:meth:`run_step`)
            self._hold_patch(self.snapshot_before, after)
        return StepResult(reason, event.usage, cost)
