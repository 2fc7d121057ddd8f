"""A step's tool calls, from the model's ``tool-call`` to the tool part's last state.

:class:`ToolCalls` is the part of the :class:`~forge.runtime.processor.Processor`
that handles them (a mixin: it writes through the processor's batches). A call is
logged ``pending`` when its input starts, then checked against the agent's tools
(built-in and MCP) and its approval rules:

* ``deny``: it ends in ``error`` with ``metadata.denied`` and never runs;
* ``ask``: it is logged ``awaiting-approval`` and not run (the turn suspends once the
  step ends; ``forge.runtime.approvals`` answers it, and :meth:`ToolCalls.run_tool` runs
  it then, in whichever process took the answer);
* ``allow``: ``running``, then ``completed`` or ``error``.

A completed call's output is logged whole up to ``FORGE_TOOL_OUTPUT_MAX_BYTES``; a
larger one is stored whole as a ``file`` part written in the same transaction
(``forge.runtime.tool_output``), and so are the files a tool returns (an MCP image).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forge import tools
from forge.context.tool_output import cut
from forge.providers import events as ev
from forge.telemetry import tracing
from forge.tools import ToolContext, ToolError, mcp
from forge.tools.registry import NAME_RE
from sessions import services
from sessions.ids import new_part_id

from . import subtask
from .approvals.asking import approval_action, approval_expiry
from .files import file_parts
from .shielding import finish_then_cancel
from .tool_output import delete_spilled, may_be_oversized, spill_if_oversized
from .turn import Turn

# What a call is logged as when the model named no function that can exist.
INVALID_TOOL = "invalid_tool"


def logged_name(tool: str) -> str:
    """The name a call is logged under: the model's, when a function can have it (the
    OpenAI rule every registered tool follows, ``forge.tools.registry``); else
    :data:`INVALID_TOOL`. The log's name goes back to the model on every later request,
    and a provider refuses a request naming ``""`` or ``repo_browser.open_file``: the
    session failed for good (QA). Such a call is unknown anyway; its error names what
    the model called."""
    return tool if NAME_RE.fullmatch(tool) else INVALID_TOOL


def bounded_error(text: str) -> str:
    """A tool's error as it is logged (and goes to the model with every later request):
    at most :data:`MODEL_OUTPUT_CHARS`, as much as the model is shown of an output, the
    cut said. An error has no file to spill to, and its text is a server's to choose: an
    MCP server's ``isError`` answer (or JSON-RPC error) of megabytes was logged whole and
    sent whole on every request after it (QA)."""
    return cut(text, f"\n\n[error truncated: showing the first {{kept}} of {len(text)} characters]")


@dataclass
class Call:
    part_id: str
    tool: str
    start: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    status: str = "pending"
    metadata: dict[str, Any] = field(default_factory=dict)  # kept in the final state (approval)


@dataclass
class Deferred:
    """An allowed call, logged ``running``, that runs once the model's step has ended."""

    call_id: str
    call: Call
    tool: tools.Tool
    args: dict[str, Any]


class ToolCalls:
    """The processor's tool calls. Needs the processor's ``turn``, ``write``, ``_part``
    and ``_now``; keeps the calls of the current step."""

    turn: Turn
    calls: dict[str, Call]  # call id -> its call, while it is open
    awaiting: list[str]  # calls of this step logged awaiting-approval
    deferred: list[Deferred]  # allowed calls of this step, run once the step ends
    running: list[services.Write]  # their ``running`` states, held from the step's end on
    mcp_tools: dict[str, tools.Tool] | None  # the agent's MCP tools, listed once per turn

    if TYPE_CHECKING:

        async def write(self, *writes: services.Write, unit: Any = None) -> Any: ...

        async def _part(self, part: dict[str, Any]) -> None: ...

        def _now(self) -> str: ...

        def _hold(self, part: dict[str, Any]) -> None: ...

    def _hold_unfinished_calls(self) -> None:
        """Every call of this step whose input the model began and never ended in a call
        (it hit its output limit inside the arguments, or its stream failed there) ends
        as an error, held for the step's last write: a ``pending`` part in a completed
        reply would wait for ever."""
        for call_id, call in list(self.calls.items()):
            if call.start is not None:  # called: running, awaiting approval or done
                continue
            del self.calls[call_id]
            call.status = "error"
            now = self._now()
            self._hold(
                {
                    "id": call.part_id,
                    "state": {
                        "status": "error",
                        "input": {},
                        "error": "the model's step ended before this call's input was complete",
                        "metadata": {},
                        "time": {"start": now, "end": now},
                    },
                }
            )

    async def _pending(self, call_id: str, tool: str) -> Call:
        call = Call(part_id=new_part_id(), tool=tool)
        self.calls[call_id] = call
        await self._part(
            {
                "id": call.part_id,
                "message_id": self.turn.message_id,
                "type": "tool",
                "call_id": call_id,
                "tool": logged_name(tool),
                "state": {"status": "pending"},
            }
        )
        return call

    async def _call(self, event: ev.ToolCall) -> None:
        turn = self.turn
        call = self.calls.get(event.call_id) or await self._pending(event.call_id, event.tool)
        call.start = self._now()
        try:
            tool, args = tools.prepare_call(
                event.tool, event.input, turn.agent.tools or None, await self.tools_for(event.tool)
            )
        except ToolError as exc:
            await self.tool_error(event.call_id, call, exc, args=exc.metadata.get("input", {}))
            return
        call.input = args
        action = approval_action(turn.agent, event.tool, args)
        if action == "deny":
            await self.tool_error(
                event.call_id,
                call,
                ToolError("denied by an approval rule", metadata={"denied": True}),
                args=args,
            )
            return
        if action == "ask" and turn.depth:
            # A subtask's turn cannot suspend (its parent waits on it): no one is asked.
            await self.tool_error(
                event.call_id,
                call,
                ToolError("denied: a subtask cannot ask for approval", metadata={"denied": True}),
                args=args,
            )
            return
        if action == "ask":
            await self._await_approval(event.call_id, call, args)
            return
        # Run once the model's call has ended (:meth:`run_deferred`), so that its
        # step-finish (what the call used) is in the log before any tool runs.
        # Its ``running`` state is kept apart, not held: a write of the step before its
        # end (a block's end, another call's opening) would carry it, and a process killed
        # then left a running call with no step-finish before it.
        call.status = "running"
        self.running.append(
            services.UpdatePart(
                part={
                    "id": call.part_id,
                    "state": {"status": "running", "input": args, "time": {"start": call.start}},
                }
            )
        )
        self.deferred.append(Deferred(event.call_id, call, tool, args))

    async def run_deferred(self) -> None:
        """Run the step's allowed calls, one after another, in the order the model made
        them. The step's end (its ``step-finish``) is held: it is written first, with
        the calls' ``running`` states, in one transaction. A process killed while a
        tool runs leaves that model call's usage logged, and its turn's recovery counts
        it."""
        deferred, self.deferred = self.deferred, []
        await self.write()
        for run in deferred:
            self.turn.raise_if_aborted()
            await self.run_tool(run.call_id, run.call, run.tool, run.args)

    def _hold_unrun_calls(self) -> None:
        """The step's allowed calls that will never run (the model's stream failed after
        it made them) end as errors, held for the step's last write."""
        deferred, self.deferred, self.running = self.deferred, [], []
        for run in deferred:
            self.calls.pop(run.call_id, None)
            run.call.status = "error"
            self._hold(
                {
                    "id": run.call.part_id,
                    "state": {
                        "status": "error",
                        "input": run.args,
                        "error": "the model's step failed before this call ran",
                        "metadata": {},
                        "time": {"start": run.call.start, "end": self._now()},
                    },
                }
            )

    async def _await_approval(self, call_id: str, call: Call, args: dict[str, Any]) -> None:
        """Log the call as waiting for an answer, and do not run it (the turn suspends
        once the step ends: ``steps``)."""
        call.status = "awaiting-approval"
        await self._part(
            {
                "id": call.part_id,
                "state": {
                    "status": "awaiting-approval",
                    "input": args,
                    "time": {"start": call.start},
                    "metadata": {"approval": {"expires_at": approval_expiry()}},
                },
            }
        )
        self.calls.pop(call_id, None)
        self.awaiting.append(call_id)

    async def run_tool(
        self, call_id: str, call: Call, tool: tools.Tool, args: dict[str, Any]
    ) -> None:
        """Run a call already logged ``running``, and log how it ended."""
        turn = self.turn
        context = ToolContext(
            session_id=turn.session.pk,
            tenant_id=turn.session.tenant_id,
            message_id=turn.message_id,
            call_id=call_id,
            agent=turn.agent.name,
            workspace=await subtask.workspace(turn),
            abort=turn.abort,
            run_subtask=turn.run_subtask,
        )
        try:
            with tracing.tool_call(tool=tool.name, call_id=call_id) as span:
                try:
                    result = await tools.execute(tool, args, context)
                except ToolError as exc:
                    # Its message quotes the call (a path, a query): content, sent
                    # only where content is (QA).
                    said = str(exc)[:200] if tracing.capturing_content() else ""
                    tracing.failed(span, "ToolError", said)
                    raise
        except ToolError as exc:
            await self.tool_error(call_id, call, exc, args=args)
            return
        call.status = "completed"
        # The tool has finished: its result is logged even if the turn is stopped
        # meanwhile (its output stored, its files made, the write), then the stop is
        # honoured. A stop during a big output's storing ended the call "aborted", its
        # result lost and the stored file named by no part (QA, MEDIUM).
        await finish_then_cancel(self._log_completed(call_id, call, args, result))

    async def _log_completed(
        self, call_id: str, call: Call, args: dict[str, Any], result: tools.ToolResult
    ) -> None:
        turn = self.turn
        spilled = None
        if may_be_oversized(result):
            spilled = await asyncio.to_thread(
                spill_if_oversized,
                session=turn.session,
                message_id=turn.message_id,
                tool=call.tool,
                call_id=call_id,
                result=result,
            )
        files = []
        if spilled is not None:  # over the log's cap: the whole output is a file part
            result = spilled.result
            files.append(services.UpdatePart(part=spilled.file_part))
        completed = services.UpdatePart(
            part={
                "id": call.part_id,
                "state": {
                    "status": "completed",
                    "input": args,
                    "output": result.output,
                    "title": result.title,
                    "metadata": {**call.metadata, **result.metadata},
                    "time": {"start": call.start, "end": self._now()},
                },
            }
        )
        # A tool's own files (an MCP server's image, say) follow the part that made them.
        made = [
            services.UpdatePart(part=part)
            for part in await file_parts(turn.session, turn.message_id, result.files)
        ]
        try:
            await self.write(*files, completed, *made)
        except BaseException:  # the log refused the parts, or the lease was lost (a
            # cancel): no file is left that none names
            if spilled is not None:
                await asyncio.to_thread(delete_spilled, spilled)
            raise
        self.calls.pop(call_id, None)

    async def tools_for(self, name: str) -> dict[str, tools.Tool]:
        """The agent's own tools a call of ``name`` needs: none for a built-in tool (no MCP
        tool has a built-in's name, ``forge.tools.mcp.adapter``), so a built-in call never
        waits for the agent's MCP servers to start; else :meth:`own_tools`."""
        return {} if tools.get_tool(name) is not None else await self.own_tools()

    async def own_tools(self) -> dict[str, tools.Tool]:
        """The turn agent's MCP tools (listed once per turn; a dead server restarts)."""
        if self.mcp_tools is None:
            servers = self.turn.agent.mcp_servers
            listing = await asyncio.to_thread(mcp.list_tools, servers) if servers else None
            self.mcp_tools = {t.name: t for t in listing.tools} if listing else {}
        return self.mcp_tools

    async def tool_error(
        self, call_id: str, call: Call, exc: ToolError, *, args: dict[str, Any]
    ) -> None:
        call.status = "error"
        metadata = {**call.metadata, **{k: v for k, v in exc.metadata.items() if k != "input"}}
        await self._part(
            {
                "id": call.part_id,
                "state": {
                    "status": "error",
                    "input": args if isinstance(args, dict) else {},
                    "error": bounded_error(exc.message),
                    "metadata": metadata,
                    "time": {"start": call.start or self._now(), "end": self._now()},
                },
            }
        )
        self.calls.pop(call_id, None)
