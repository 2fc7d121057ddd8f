"""Subtasks: the ``task`` tool, and how a turn runs one (a named agent's turn in a
child session, whose final answer becomes the tool's result)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from forge.db.worker import db
from forge.errors import UnknownAgent
from forge.tools import ToolContext, ToolError, ToolResult, tool, workspace_path
from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.models import Session

from .agents import get_agent
from .turn import Turn

MAX_SUBTASK_DEPTH = 2


def workspace_session_id(session: Session) -> str:
    """The session whose workspace a turn of ``session`` works in: its own, or for a
    subtask's child session the root of its parents. A subtask works on the files of
    the session that asked for it ("explore the workspace"); a child with a workspace
    of its own found nothing there (QA). A child whose parent was deleted (with its
    workspace) has its own again."""
    owner_id, parent_id = session.pk, session.parent_id
    for _ in range(MAX_SUBTASK_DEPTH + 1):
        if parent_id is None:
            break
        row = Session.objects.filter(pk=parent_id).values_list("pk", "parent_id").first()
        if row is None:
            break
        owner_id, parent_id = row
    return owner_id


async def workspace(turn: Turn) -> Path:
    """The path of the workspace the turn's tools use (:func:`workspace_session_id`),
    found once per turn; a session with no parent needs no query."""
    if turn.workspace is None:
        session = turn.session
        owner = session.pk if session.parent_id is None else None
        if owner is None:
            owner = await db(workspace_session_id)(session)
        turn.workspace = workspace_path(owner, tenant_id=session.tenant_id, create=False)
    return turn.workspace


class _Started(Protocol):
    @property
    def assistant_message_id(self) -> str: ...

    @property
    def task(self) -> asyncio.Task[None]: ...


# ``start_turn(session=, text=, agent=, depth=, speaker=)``: passed in by the runner (which
# imports this).
StartTurn = Callable[..., Awaitable[_Started]]


@tool(
    name="task",
    description=(
        "Hand a self-contained piece of work to another agent (for example 'explore' to look "
        "through the workspace). It runs in a child session; its final answer is returned."
    ),
    parameters={
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 1, "maxLength": 200},
            "prompt": {"type": "string", "minLength": 1},
            "agent": {"type": "string", "minLength": 1},
        },
        "required": ["description", "prompt", "agent"],
        "additionalProperties": False,
    },
    timeout=600,
)
async def task(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    if ctx.run_subtask is None:
        raise ToolError("subtasks cannot run here")
    return await ctx.run_subtask(args["agent"], args["prompt"], args["description"])


def subtask_runner(
    parent: Turn, start: StartTurn, stop: Callable[[Any], None]
) -> Callable[[str, str, str], Awaitable[ToolResult]]:
    """What ``parent``'s ``task`` tool calls: run ``agent`` on ``prompt`` in a child session.
    ``stop``: stops a turn ``start`` started (``runner.stop_started``)."""

    async def run_subtask(agent: str, prompt: str, description: str) -> ToolResult:
        if parent.depth >= MAX_SUBTASK_DEPTH:
            raise ToolError(f"subtasks may nest at most {MAX_SUBTASK_DEPTH} deep")
        try:
            child, part_id = await db(_open_subtask)(parent, agent, prompt, description)
        except UnknownAgent as exc:
            raise ToolError(str(exc)) from None
        # The child's turn is the parent's speaker's: its memory tools read their memory.
        begun = asyncio.ensure_future(
            start(
                session=child,
                text=prompt,
                agent=agent,
                depth=parent.depth + 1,
                speaker=parent.speaker,
            )
        )
        try:
            started = await asyncio.shield(begun)
        except asyncio.CancelledError:
            # Stopped as the child's turn was starting: its start goes on to its end (a
            # committed prompt's turn is started: ``runner._begin``), and the child is
            # stopped once started. It ran to its end unwatched, its tools and tokens
            # spent after the user's stop (review).
            # (By a callback: a second cancel, ending this wait, must not skip the stop.)
            begun.add_done_callback(_stop_once_started(stop))
            await asyncio.wait({begun})
            if not begun.cancelled() and begun.exception() is None:
                await asyncio.wait({begun.result().task})
            raise
        try:
            await asyncio.shield(started.task)
        except asyncio.CancelledError:
            started.task.cancel()
            await asyncio.wait({started.task})
            raise
        reply = await db(_final_text)(child, started.assistant_message_id)
        if reply["error"]:
            raise ToolError(
                f"the {agent} subtask failed: {reply['error']['message']}",
                metadata={"child_session_id": child.pk},
            )
        output = reply["text"] or "(the subtask gave no answer)"
        if reply["finish"] in _CUT_SHORT:
            # Said, not passed off as its answer (QA: a subtask that used up its steps
            # read as a finished, empty answer).
            output += f"\n\n[{_CUT_SHORT[reply['finish']]}; its session is {child.pk}]"
        return ToolResult(
            output=output,
            title=description,
            metadata={"child_session_id": child.pk, "subtask_part_id": part_id},
        )

    return run_subtask


def _stop_once_started(stop: Callable[[Any], None]) -> Callable[[asyncio.Future[Any]], None]:
    def stop_it(begun: asyncio.Future[Any]) -> None:
        if not begun.cancelled() and begun.exception() is None:
            stop(begun.result())

    return stop_it


def _open_subtask(parent: Turn, agent: str, prompt: str, description: str) -> tuple[Session, str]:
    get_agent(agent)
    owner = parent.session.user
    if owner is None:
        raise UnknownAgent("the parent session has no owner to run a subtask for")
    child = services.create_session(
        user=owner,
        tenant=parent.session.tenant,
        title=description[:255],
        agent=agent,
        parent=parent.session,
    )
    event = services.update_part(
        session=parent.session,
        part={
            "message_id": parent.message_id,
            "type": "subtask",
            "prompt": prompt,
            "description": description,
            "agent": agent,
            "child_session_id": child.pk,
        },
    )
    return child, event.data["id"]


# A subtask's reply that ended before its answer, as its ``finish`` says.
_CUT_SHORT = {
    "step-limit": "the subtask stopped at its agent's step limit before it answered",
    "length": "the subtask's answer was cut at the model's output limit",
    "content-filter": "the subtask's answer was cut by the model's content filter",
}


def _final_text(session: Session, message_id: str) -> dict[str, Any]:
    try:
        reply = selectors.get_message(
            tenant=session.tenant, session_id=session.pk, message_id=message_id
        )
    except NotFound:
        return {"text": "", "error": {"message": "the subtask's reply is missing"}, "finish": None}
    text = "\n".join(p["text"] for p in reply["parts"] if p["type"] == "text").strip()
    info = reply["info"]
    return {"text": text, "error": info.get("error"), "finish": info.get("finish")}
