"""Starting, waiting for, aborting and recovering turns: the runtime's entry.

The faces (API views, the WebSocket consumer, management commands) call only
these functions. A turn runs as its own asyncio task in the process that took
the session's lease; it never runs inside a consumer's receive handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import mimetypes
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from forge.context import fold_context
from forge.providers import UnknownModel, split_model
from forge.tools import ToolResult, tool_specs
from sessions import bus, selectors, services
from sessions.exceptions import ForgeError
from sessions.hub import Receiver
from sessions.ids import new_message_id, new_part_id
from sessions.models import Session

from . import lease
from .agents import AgentConfig, UnknownAgent, default_agent, get_agent, mentioned_agent
from .db import db
from .finalize import INTERRUPTED, finalize_open_messages
from .inflight import mirror
from .janitor import ensure_janitor
from .loop import run_turn
from .processor import status_frame
from .turn import Turn

logger = logging.getLogger(__name__)

MAX_FILES = 10
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_INLINE_TEXT = 100_000  # a text attachment larger than this is not inlined for the model
MAX_SUBTASK_DEPTH = 2
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class InvalidPrompt(ForgeError, ValueError):
    code = "invalid_prompt"


class NotRunning(ForgeError):
    """Abort asked for, but no turn runs."""

    code = "not_running"


@dataclass(frozen=True)
class Attachment:
    filename: str
    content: bytes
    mime: str = ""


@dataclass(frozen=True)
class StartedTurn:
    session_id: str
    message: dict[str, Any]  # the user message, {info, parts}
    assistant_message_id: str
    task: asyncio.Task[None]


@dataclass
class _Runner:
    turn: Turn
    task: asyncio.Task[None]


# The turns this process runs, by session id.
_runners: dict[str, _Runner] = {}
# Every task the runtime started (turns, titles), until it ends.
_background: set[asyncio.Task[Any]] = set()


def _track(task: asyncio.Task[Any]) -> asyncio.Task[Any]:
    _background.add(task)
    task.add_done_callback(_background.discard)
    return task


async def settle(timeout: float = 10.0) -> None:
    """Wait until the turns and background work this event loop runs have ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    # A task may start another as it ends (a turn its title, its listener's cleanup).
    while pending := {t for t in _background if t.get_loop() is loop and not t.done()}:
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.wait(pending, timeout=left)


def runner_group(session_id: str) -> str:
    return f"forge.runner.{session_id}"


# --- starting ---------------------------------------------------------------------


def _clean_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidPrompt("a prompt needs some text")
    if len(text.encode()) > settings.FORGE_MAX_PROMPT_BYTES:
        raise InvalidPrompt(
            f"the prompt is larger than {settings.FORGE_MAX_PROMPT_BYTES} bytes",
        )
    return text


def _clean_files(files: Sequence[Attachment]) -> list[Attachment]:
    if len(files) > MAX_FILES:
        raise InvalidPrompt(f"at most {MAX_FILES} files per prompt")
    cleaned = []
    for attachment in files:
        if len(attachment.content) > MAX_FILE_BYTES:
            raise InvalidPrompt(f"{attachment.filename!r} is larger than {MAX_FILE_BYTES} bytes")
        name = _SAFE_NAME.sub("_", attachment.filename.rsplit("/", 1)[-1]).strip("._") or "file"
        mime = attachment.mime or mimetypes.guess_type(name)[0] or "application/octet-stream"
        cleaned.append(Attachment(filename=name[:120], content=attachment.content, mime=mime))
    return cleaned


def _choose_agent(session: Session, text: str, agent: str | None) -> tuple[AgentConfig, bool]:
    """The turn's agent, and whether the prompt named it with ``@name``."""
    if agent:
        return get_agent(agent), False
    mentioned = mentioned_agent(text)
    if mentioned:
        return get_agent(mentioned), True
    if session.agent:
        return get_agent(session.agent), False
    return default_agent(), False


def agent_blocks(agent: AgentConfig) -> list[dict[str, Any]]:
    """The context blocks an agent contributes: its system prompt, its tools, its settings."""
    return [
        {"kind": "system", "key": "agent", "agent": agent.name, "text": agent.system_prompt},
        {
            "kind": "tools",
            "key": "agent",
            "tools": [spec.as_dict() for spec in tool_specs(agent.tools or None)],
        },
        {
            "kind": "settings",
            "key": "agent",
            "model": agent.resolved_model,
            "temperature": agent.temperature,
        },
    ]


def _is_text(attachment: Attachment) -> bool:
    if not attachment.mime.startswith(("text/", "application/json", "application/xml")):
        return False
    try:
        attachment.content.decode()
    except UnicodeDecodeError:
        return False
    return len(attachment.content) <= MAX_INLINE_TEXT


def _begin(
    session: Session, text: str, agent_name: str | None, files: Sequence[Attachment]
) -> tuple[Turn, dict[str, Any]]:
    """Validate, take the lease, and log the prompt (one unit of work)."""
    text = _clean_text(text)
    attachments = _clean_files(files)
    agent, mentioned = _choose_agent(session, text, agent_name)
    model = agent.resolved_model
    try:
        provider, model_name = split_model(model)
    except UnknownModel as exc:
        raise InvalidPrompt(str(exc)) from None
    user_id, assistant_id = new_message_id(), new_message_id()
    stored: list[str] = []
    try:
        file_parts = []
        for attachment in attachments:
            part_id = new_part_id()
            path = default_storage.save(
                f"uploads/{session.pk}/{part_id}/{attachment.filename}",
                ContentFile(attachment.content),
            )
            stored.append(path)
            file_parts.append((part_id, attachment, default_storage.url(path)))
        # One transaction: the lease, any recovery it calls for, and the prompt.
        with transaction.atomic():
            if lease.acquire(session=session, message_id=assistant_id) is not None:
                finalize_open_messages(session=session, reason=INTERRUPTED)
            current = fold_context(
                selectors.context_updates(tenant=session.tenant, session=session)
            )
            changed = [
                b for b in agent_blocks(agent) if current.get(f"{b['kind']}:{b['key']}") != b
            ]
            if changed:
                services.append_event(
                    session=session, type="context.updated", data={"blocks": changed}
                )
            model_info = {"provider": provider, "model": model_name}
            user_info = services.update_message(
                session=session,
                info={"id": user_id, "role": "user", "agent": agent.name, "model": model_info},
            ).data
            parts: list[dict[str, Any]] = [{"message_id": user_id, "type": "text", "text": text}]
            if mentioned:
                parts.append({"message_id": user_id, "type": "agent", "name": agent.name})
            for part_id, attachment, url in file_parts:
                parts.append(
                    {
                        "id": part_id,
                        "message_id": user_id,
                        "type": "file",
                        "mime": attachment.mime,
                        "filename": attachment.filename,
                        "url": url,
                    }
                )
                if _is_text(attachment):
                    parts.append(
                        {
                            "message_id": user_id,
                            "type": "text",
                            "synthetic": True,
                            "text": f'<file name="{attachment.filename}">\n'
                            f"{attachment.content.decode()}\n</file>",
                        }
                    )
            user_parts = [services.update_part(session=session, part=p).data for p in parts]
            services.update_message(
                session=session,
                info={
                    "id": assistant_id,
                    "role": "assistant",
                    "parent_id": user_id,
                    "agent": agent.name,
                    "model": model_info,
                },
            )
    except BaseException:
        for path in stored:
            default_storage.delete(path)
        raise
    user_message = {"info": user_info, "parts": user_parts}
    turn = Turn(
        session=session,
        user_message_id=user_id,
        message_id=assistant_id,
        agent=agent,
        model=model,
    )
    return turn, user_message


async def start_turn(
    *,
    session: Session,
    text: str,
    agent: str | None = None,
    files: Sequence[Attachment] = (),
    _depth: int = 0,
    _janitor: bool = True,
) -> StartedTurn:
    """Log the prompt and start the reply as a task of the running event loop.

    Raises ``InvalidPrompt`` / ``UnknownAgent`` for bad input (nothing written)
    and ``SessionBusy`` while another turn of the session runs.
    """
    if _janitor:
        ensure_janitor()
    turn, user_message = await db(_begin)(session, text, agent, files)
    turn.depth = _depth
    turn.run_subtask = _subtask_runner(turn)
    # A fresh context: the task must not inherit a request's thread-sensitive executor.
    task = _track(
        asyncio.get_running_loop().create_task(
            _run(turn), name=f"forge-turn-{session.pk}", context=contextvars.Context()
        )
    )
    _runners[session.pk] = _Runner(turn=turn, task=task)
    return StartedTurn(
        session_id=session.pk,
        message=user_message,
        assistant_message_id=turn.message_id,
        task=task,
    )


async def _run(turn: Turn) -> None:
    session_id = turn.session.pk
    me = asyncio.current_task()
    assert me is not None
    heartbeat = asyncio.create_task(_heartbeat(turn, me))
    listener = await _abort_receiver(turn, me)
    try:
        await run_turn(turn)
    finally:
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)
        if listener is not None:
            # Not awaited: the turn is over, and its end must not wait on the layer.
            _track(asyncio.get_running_loop().create_task(listener.leave()))
        await asyncio.shield(db(lease.release)(session_id=session_id))
        if _runners.get(session_id) and _runners[session_id].turn is turn:
            del _runners[session_id]
        await bus.apublish(session_id, status_frame(session_id, "idle"))
    if turn.depth == 0 and not turn.session.title:
        _track(
            asyncio.get_running_loop().create_task(
                _title_later(turn), context=contextvars.Context()
            )
        )


async def _heartbeat(turn: Turn, task: asyncio.Task[Any]) -> None:
    """Renew the lease while the turn runs; stop the turn if the lease was lost."""
    interval = lease.lease_seconds() / 3
    while True:
        await asyncio.sleep(interval)
        if not await db(lease.renew)(session_id=turn.session.pk):
            logger.error("lost the lease of session %s; stopping its turn", turn.session.pk)
            turn.abort.set()
            task.cancel()
            return


async def _abort_receiver(turn: Turn, task: asyncio.Task[Any]) -> Receiver | None:
    """Abort requests from other processes arrive over the channel layer."""
    from channels.layers import get_channel_layer

    if get_channel_layer() is None:
        return None

    def handle(message: dict[str, Any]) -> bool:
        if message.get("type") != "forge.abort":
            return False
        turn.abort.set()
        task.cancel()
        return True

    return await Receiver.join(
        runner_group(turn.session.pk), handle, name=f"the abort group of {turn.session.pk}"
    )


# --- waiting and aborting ---------------------------------------------------------


def running_turn(session_id: str) -> asyncio.Task[None] | None:
    runner = _runners.get(session_id)
    return runner.task if runner else None


async def wait_for_turn(session_id: str, timeout: float | None = None) -> None:
    """Wait until the session's turn in this process has ended (if there is one)."""
    task = running_turn(session_id)
    if task is not None:
        await asyncio.wait({task}, timeout=timeout)


async def abort_turn(*, session: Session, timeout: float = 10.0) -> None:
    """Stop the session's running turn and return once it is finalized.

    Raises ``NotRunning`` when no turn runs.
    """
    runner = _runners.get(session.pk)
    if runner is not None and not runner.task.done():
        runner.turn.abort.set()
        runner.task.cancel()
        await asyncio.wait({runner.task}, timeout=timeout)
        return
    current = await db(lease.current)(session_id=session.pk)
    if current is None:
        raise NotRunning("no turn is running in this session")
    if current.expires_at <= timezone.now():
        await db(recover_session)(session)
        return
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(runner_group(session.pk), {"type": "forge.abort"})
    deadline = asyncio.get_running_loop().time() + timeout
    while await db(lease.current)(session_id=session.pk) is not None:
        if asyncio.get_running_loop().time() > deadline:
            raise NotRunning("the process running this turn did not stop in time")
        await asyncio.sleep(0.05)


# --- subtasks ---------------------------------------------------------------------


def _subtask_runner(parent: Turn) -> Any:
    async def run_subtask(agent: str, prompt: str, description: str) -> ToolResult:
        from forge.tools import ToolError

        if parent.depth >= MAX_SUBTASK_DEPTH:
            raise ToolError(f"subtasks may nest at most {MAX_SUBTASK_DEPTH} deep")
        try:
            child, part_id = await db(_open_subtask)(parent, agent, prompt, description)
        except UnknownAgent as exc:
            raise ToolError(str(exc)) from None
        started = await start_turn(session=child, text=prompt, agent=agent, _depth=parent.depth + 1)
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
        return ToolResult(
            output=reply["text"] or "(the subtask gave no answer)",
            title=description,
            metadata={"child_session_id": child.pk, "subtask_part_id": part_id},
        )

    return run_subtask


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


def _final_text(session: Session, message_id: str) -> dict[str, Any]:
    for item in selectors.iter_history(tenant=session.tenant, session_id=session.pk):
        if item["info"]["id"] == message_id:
            text = "\n".join(p["text"] for p in item["parts"] if p["type"] == "text").strip()
            return {"text": text, "error": item["info"].get("error")}
    return {"text": "", "error": {"message": "the subtask's reply is missing"}}


# --- titles -----------------------------------------------------------------------


async def _title_later(turn: Turn) -> None:
    from .title import generate_title

    try:
        await generate_title(turn.session)
    except Exception:
        logger.exception("could not title session %s", turn.session.pk)


# --- recovery ---------------------------------------------------------------------


def recover_session(session: Session) -> list[str]:
    """Finalize the turn a dead runner left open in this session (if its lease expired).

    Open parts keep the text that had streamed when the Redis mirror has it.
    """
    with transaction.atomic():
        current = lease.current(session_id=session.pk)
        if current is not None and current.expires_at > timezone.now():
            return []  # a live runner holds it
        shared = mirror()
        texts = shared.texts_sync(session.pk) if shared is not None else {}
        finished = finalize_open_messages(session=session, reason=INTERRUPTED, texts=texts)
        if current is not None:
            current.delete()
    return finished


def recover_sessions(*, session_id: str | None = None) -> dict[str, list[str]]:
    """Finalize every turn left open by a process that died: ``{session: [message ids]}``.

    A session whose lease is live is left alone (another process runs it).
    """
    from sessions.models import Message

    candidates = set(lease.expired_sessions())
    candidates |= set(
        Message.objects.filter(role="assistant", data__completed_at=None).values_list(
            "session_id", flat=True
        )
    )
    if session_id is not None:
        candidates &= {session_id}
    recovered: dict[str, list[str]] = {}
    for session in Session.objects.filter(pk__in=candidates).select_related("tenant"):
        finished = recover_session(session)
        if finished:
            recovered[session.pk] = finished
    return recovered


# --- for synchronous callers (API views, commands) ---------------------------------


@dataclass(frozen=True)
class PromptResult:
    message: dict[str, Any]  # the user message, {info, parts}
    assistant_message_id: str
    reply: dict[str, Any] | None  # the finished reply, {info, parts}, when waited for


def prompt(
    *,
    session: Session,
    text: str,
    agent: str | None = None,
    files: Sequence[Attachment] = (),
    wait: bool = False,
) -> PromptResult:
    """Start a turn from synchronous code.

    Under an ASGI server (a thread working for its event loop) the turn runs as a
    task of that loop and this returns once the prompt is logged (or, with
    ``wait``, once the reply is finished). Where no event loop runs (WSGI, a
    management command) the turn runs to its end here, before this returns.
    """
    from asgiref.sync import async_to_sync

    loop = bus.server_loop()
    if loop is not None:

        async def start() -> StartedTurn:
            started = await start_turn(session=session, text=text, agent=agent, files=files)
            if wait:
                await asyncio.wait({started.task})
            return started

        started = async_to_sync(start)()
        finished = wait
    else:

        async def whole() -> StartedTurn:
            started = await start_turn(
                session=session, text=text, agent=agent, files=files, _janitor=False
            )
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
    """:func:`abort_turn` for synchronous callers."""
    from asgiref.sync import async_to_sync

    async_to_sync(abort_turn)(session=session)


def context_for(*, session: Session, at: int | None = None) -> dict[str, Any]:
    """Exactly what the model is sent for the session's next step (system, messages,
    tools, settings), derived from the log: at its end, or as of event ``at``."""
    from forge.context import build_request

    tenant = session.tenant
    if at is None:
        history: Any = selectors.iter_history(tenant=tenant, session_id=session.pk)
        updates = selectors.context_updates(tenant=tenant, session=session)
    else:
        history = selectors.history_at(tenant=tenant, session=session, seq=at)
        updates = selectors.context_updates(tenant=tenant, session=session, upto_seq=at)
    blocks = fold_context(updates)
    settings_block = blocks.get("settings:agent", {})
    model = settings_block.get("model") or default_agent().resolved_model
    _, _, name = model.partition("/")
    request = build_request(blocks=blocks, history=history, model=name)
    return {"at": at, "provider_model": model, **request.as_dict()}
