"""A prompt, from what a face received to the logged user message: the one place a
prompt is validated (text, size, files, agent, model) and written.

:func:`begin` is one unit of work: store the attachments, take the session's
lease (recovering a dead runner's turn if its lease had expired), and log, as
one batch (``services.append_batch``), the context blocks that changed, the
user message with its parts, and the empty assistant message the reply will
fill. Bad input raises before anything is written; a failure after the files
were stored removes them again.
"""

from __future__ import annotations

import html
import mimetypes
import re
import time
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from accounts.selectors import is_member
from forge.context.blocks import blocks_in_force, blocks_update
from forge.errors import InvalidPrompt, PromptTooLarge, UnknownModel
from forge.providers import split_model
from forge.providers.base import ToolSpec
from forge.tools import mcp, tool_specs
from forge.usage.budgets import check_budget, reserve
from forge.usage.selectors import Limit
from sessions import services
from sessions.exceptions import NotFound
from sessions.ids import new_message_id, new_part_id
from sessions.models import Session

from . import lease
from .agents import AgentConfig, default_agent, get_agent, mentioned_agent
from .approvals.pending import deny_for_new_prompt
from .dialogue import memory_blocks
from .files import file_url, put_in_workspace, upload_path
from .recovery import finalize_dead_turn
from .turn import Turn

MAX_FILES = 10
MAX_FILE_BYTES = 10 * 1024 * 1024
# Text attachments inlined for the model, in all, per prompt: the files after that are
# saved in the workspace and announced (as a larger one is), for its tools to read.
MAX_INLINE_TEXT = 100_000
# MCP tools left out that the agent's notice names, one by one (a server may list thousands).
MAX_LEFT_OUT_SHOWN = 20
# A closing tag inside an inlined file would end its frame early (``</file>``, any case).
_FILE_CLOSER = re.compile(r"</(?=file\b)", re.IGNORECASE)
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_INLINED_MIMES = ("text/", "application/json", "application/xml")
# type/subtype, then parameters: printable ASCII only (RFC 6838 names, RFC 9110 parameters).
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}(;[ -~]*)?"
)


@dataclass(frozen=True)
class Attachment:
    filename: str
    content: bytes
    mime: str = ""


def clean_text(text: Any) -> str:
    if not isinstance(text, str):
        raise InvalidPrompt("text must be a string")
    if not text.strip():
        raise InvalidPrompt("a prompt needs some text (files alone are not a prompt)")
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise InvalidPrompt("the prompt is not valid Unicode (a lone surrogate)") from None
    if "\x00" in text:
        raise InvalidPrompt("the prompt contains a NUL character")
    if size > settings.FORGE_MAX_PROMPT_BYTES:
        raise PromptTooLarge(
            f"the prompt is {size} bytes; the limit is {settings.FORGE_MAX_PROMPT_BYTES}"
        )
    return text


def display_name(filename: str) -> str:
    """The name a file part keeps, as the user gave it: its last path segment, control
    and format characters (a NUL, a right-to-left override) as ``_``, spaces at its
    ends trimmed, at most 120 characters; ``file`` when nothing is left. (Until
    2026-12-05 it was reduced to ``[A-Za-z0-9._-]``, and ``é 日本.txt`` was logged as
    ``txt``; the stored file's name still is: :func:`storage_name`.)"""
    last = re.split(r"[/\\]", filename)[-1]
    cleaned = "".join("_" if unicodedata.category(c)[0] == "C" else c for c in last)
    cleaned = cleaned.strip()[:120].strip()
    return "file" if cleaned in ("", ".", "..") else cleaned


def storage_name(filename: str) -> str:
    """The stored file's name: ``[A-Za-z0-9._-]`` only, its extension kept (``é 日本.txt``
    is stored as ``file.txt``)."""
    stem, dot, extension = filename.rpartition(".")
    if not dot:
        stem, extension = filename, ""
    stem = _SAFE_NAME.sub("_", stem).strip("._") or "file"
    extension = _SAFE_NAME.sub("", extension)[:16]
    return f"{stem}.{extension}"[:120] if extension else stem[:120]


def clean_files(files: Sequence[Attachment]) -> list[Attachment]:
    """The attachments as they are stored: at most :data:`MAX_FILES` of at most
    :data:`MAX_FILE_BYTES` each, names as :func:`display_name` keeps them (stored
    under :func:`storage_name`), and a media type that is one (``type/subtype``
    and parameters, printable ASCII; else ``InvalidPrompt``). The content is stored
    as it is, NUL bytes included: a file is bytes (see :func:`_is_inlined`)."""
    if len(files) > MAX_FILES:
        raise InvalidPrompt(f"at most {MAX_FILES} files per prompt")
    cleaned = []
    for attachment in files:
        if len(attachment.content) > MAX_FILE_BYTES:
            raise PromptTooLarge(f"{attachment.filename!r} is larger than {MAX_FILE_BYTES} bytes")
        name = display_name(attachment.filename)
        if attachment.mime and not _MEDIA_TYPE.fullmatch(attachment.mime):
            raise InvalidPrompt(f"{name!r}: {attachment.mime[:60]!r} is not a media type")
        mime = attachment.mime or mimetypes.guess_type(name)[0] or "application/octet-stream"
        kind, sep, parameters = mime.partition(";")  # a type is case-insensitive (RFC 9110):
        mime = kind.strip().lower() + sep + parameters  # TEXT/PLAIN was never inlined (QA)
        cleaned.append(Attachment(filename=name[:120], content=attachment.content, mime=mime))
    return cleaned


class McpServersStarting(Exception):
    """Raised before anything is written when the turn's agent has MCP servers whose
    listing would wait for a start (``mcp.will_wait``): the caller starts them off the
    runtime's one database thread (``runner``), then begins again with the listing
    made there (``mcp_listing``), used as it is: listing again could start a server
    that just failed a second time. Started on the database thread, a server slow to
    start held up every session of the process: their prompts, aborts and answers
    (QA, HIGH)."""

    def __init__(self, servers: Mapping[str, Any]) -> None:
        super().__init__("the agent's MCP servers are starting")
        self.servers = servers


def starting_check(agent: AgentConfig, *, mcp_listing: mcp.Listing | None) -> None:
    """:class:`McpServersStarting` when ``agent``'s MCP servers must be started first
    (no ``mcp_listing`` of them made off the database thread yet)."""
    if agent.mcp_servers and mcp_listing is None and mcp.will_wait(agent.mcp_servers):
        raise McpServersStarting(agent.mcp_servers)


def choose_agent(session: Session, text: str, agent: Any) -> tuple[AgentConfig, bool]:
    """The turn's agent, and whether the prompt named it with ``@name``."""
    if agent is not None and not isinstance(agent, str):
        raise InvalidPrompt("agent must be an agent's name")
    if agent:
        return get_agent(agent), False
    mentioned = mentioned_agent(text)
    if mentioned:
        return get_agent(mentioned), True
    if session.agent:
        return get_agent(session.agent), False
    return default_agent(), False


def agent_blocks(agent: AgentConfig, listing: mcp.Listing | None = None) -> list[dict[str, Any]]:
    """The context blocks an agent contributes: its system prompt, its tools (its MCP
    servers' among them), its settings, and a notice naming any MCP server whose tools
    are missing (the model and the operator both see it). Starts the agent's MCP
    servers not running yet, unless ``listing`` (of them, just made) is given: call it
    outside a transaction."""
    if listing is None:
        listing = mcp.list_tools(agent.mcp_servers) if agent.mcp_servers else mcp.Listing()
    specs = [spec.as_dict() for spec in tool_specs(agent.tools or None)]
    specs += [ToolSpec(t.name, t.description, t.parameters).as_dict() for t in listing.tools]
    notice: dict[str, Any] = {"kind": "mcp", "key": "agent", "removed": True}
    said = []
    if listing.failures:
        said.append(
            "These MCP servers are unavailable, so their tools are missing: "
            + "; ".join(f"{name}: {why}" for name, why in sorted(listing.failures.items()))
        )
    if listing.left_out:
        left_out = sorted(listing.left_out.items())
        shown = [f"{name} ({why[:300]})" for name, why in left_out[:MAX_LEFT_OUT_SHOWN]]
        if len(left_out) > MAX_LEFT_OUT_SHOWN:
            shown.append(f"and {len(left_out) - MAX_LEFT_OUT_SHOWN} more")
        said.append("These MCP tools are left out: " + "; ".join(shown))
    if said:
        notice = {"kind": "mcp", "key": "agent", "text": "\n".join(said)}
    return [
        {"kind": "system", "key": "agent", "agent": agent.name, "text": agent.system_prompt},
        {"kind": "tools", "key": "agent", "tools": sorted(specs, key=lambda s: s["name"])},
        notice,
        {
            "kind": "settings",
            "key": "agent",
            "model": agent.resolved_model,
            "temperature": agent.temperature,
        },
    ]


def model_info(agent: AgentConfig) -> dict[str, str]:
    """The ``model`` a message of ``agent`` records; ``InvalidPrompt`` for an unknown one."""
    try:
        provider, model_name = split_model(agent.resolved_model)
    except UnknownModel as exc:
        raise InvalidPrompt(str(exc)) from None
    return {"provider": provider, "model": model_name}


def reply_message(
    *,
    message_id: str,
    parent_id: str,
    agent: AgentConfig,
    model: dict[str, str],
    speaker: AbstractBaseUser | None,
) -> services.UpdateMessage:
    """The write of the empty assistant message a turn's reply fills: the one shape a
    prompt's reply and a regenerated reply share. It names the turn's speaker, so
    whoever finishes the turn reads it from the log."""
    return services.UpdateMessage(
        info={
            "id": message_id,
            "role": "assistant",
            "parent_id": parent_id,
            "agent": agent.name,
            "model": model,
            **speaker_field(speaker),
        }
    )


def speaker_field(speaker: AbstractBaseUser | None) -> dict[str, Any]:
    """``{"user_id": …}`` of a message the speaker's turn logs (nothing without one)."""
    return {} if speaker is None else {"user_id": speaker.pk}


def within_budget(session: Session, speaker: AbstractBaseUser | None) -> list[Limit]:
    """Refuse (``BudgetExceeded``) a turn of ``speaker`` once a monthly budget of the
    session's tenant, or of the speaker in it, is used up (forge.usage.budgets); else
    the budgets that apply, for :func:`hold_budget` in the turn's transaction."""
    if speaker is None:
        return []
    return check_budget(tenant=session.tenant, user_id=int(str(speaker.pk)))


def hold_budget(
    session: Session, speaker: AbstractBaseUser | None, budgets: list[Limit], model: str
) -> None:
    """In the turn's transaction, after its lease: refuse the turn when the replies still
    running hold the rest of a budget, else reserve this one's estimate on the lease
    (``forge.usage.budgets.reserve``). Nothing without budgets."""
    if budgets and speaker is not None:
        reserve(
            tenant=session.tenant,
            user_id=int(str(speaker.pk)),
            session_id=session.pk,
            budgets=budgets,
            model=model,
        )


def check_speaker(session: Session, speaker: AbstractBaseUser | None) -> AbstractBaseUser | None:
    """The turn's speaker: the user given, who must be a member of the session's tenant
    (the faces only pass such users), or the session's owner when none is given."""
    if speaker is None:
        return session.user
    if speaker.pk != session.user_id and not is_member(user=speaker, tenant=session.tenant):
        raise NotFound(f"no session {session.pk!r}")  # as for a session of another tenant
    return speaker


def _is_inlined(attachment: Attachment, room: int) -> bool:
    """A text attachment small enough to reach the model as text: within ``room``, what
    is left of the prompt's :data:`MAX_INLINE_TEXT`.

    Text is valid UTF-8 without NUL bytes: a file holding a NUL is binary, whatever
    its type says (as ``git`` and ``file`` judge), and reaches the model as a file
    part alone. The log, where the synthetic text part would go, stores no NUL."""
    if len(attachment.content) > room:
        return False
    if not attachment.mime.startswith(_INLINED_MIMES) or b"\x00" in attachment.content:
        return False
    try:
        attachment.content.decode()
    except UnicodeDecodeError:
        return False
    return True


def _inlined_text(attachment: Attachment) -> str:
    """A file as the model reads it, framed by ``<file name=…>`` and ``</file>``. A
    closing tag in the file is written ``<\\/file>``, so that what follows it stays
    inside the frame and cannot pass for the user's own words."""
    content = _FILE_CLOSER.sub(r"<\\/", attachment.content.decode())
    return f'<file name="{html.escape(attachment.filename)}">\n{content}\n</file>'


def _user_parts(
    user_id: str, text: str, agent: AgentConfig, mentioned: bool, files: list[Any]
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"message_id": user_id, "type": "text", "text": text}]
    if mentioned:
        parts.append({"message_id": user_id, "type": "agent", "name": agent.name})
    for part_id, attachment, url, in_workspace in files:  # None: inlined
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
        if in_workspace is None:
            parts.append(
                {
                    "message_id": user_id,
                    "type": "text",
                    "synthetic": True,
                    "text": _inlined_text(attachment),
                }
            )
        else:  # what the model is told of a file not shown inline
            parts.append(
                {
                    "message_id": user_id,
                    "type": "text",
                    "synthetic": True,
                    "text": f'<file name="{html.escape(attachment.filename)}" '
                    f'type="{html.escape(attachment.mime)}" bytes="{len(attachment.content)}" '
                    f'workspace_path="{in_workspace}" />',
                }
            )
    return parts


def begin(
    session: Session,
    text: Any,
    agent_name: Any,
    files: Sequence[Attachment],
    depth: int = 0,
    speaker: AbstractBaseUser | None = None,
    *,
    mcp_listing: mcp.Listing | None = None,
) -> tuple[Turn, dict[str, Any]]:
    """Validate, take the lease, and log the prompt (one unit of work).

    ``speaker`` is the user who sent the prompt (None: the session's owner); the
    prompt and the reply record them, and the turn's memory is theirs.
    Returns the turn to run and the logged user message ``{info, parts}``.
    Raises ``BudgetExceeded`` (a monthly budget of the tenant or the speaker is used
    up), ``InvalidPrompt`` (``PromptTooLarge``), ``UnknownAgent``, ``SessionBusy``:
    then nothing is written.
    """
    speaker = check_speaker(session, speaker)
    # A subtask is part of its parent's turn, which was let in (and holds) already.
    budgets = within_budget(session, speaker) if not depth else []
    text = clean_text(text)
    attachments = clean_files(files)
    agent, mentioned = choose_agent(session, text, agent_name)
    starting_check(agent, mcp_listing=mcp_listing)  # before anything is stored
    model = agent.resolved_model
    model_of_messages = model_info(agent)
    user_id, assistant_id = new_message_id(), new_message_id()
    stored: list[str] = []
    saved: list[Path] = []  # in the workspace
    try:
        file_parts = []
        room = MAX_INLINE_TEXT
        for attachment in attachments:
            part_id = new_part_id()
            name = storage_name(attachment.filename)
            path = default_storage.save(
                upload_path(session, part_id, name), ContentFile(attachment.content)
            )
            stored.append(path)
            in_workspace = None
            if _is_inlined(attachment, room):
                room -= len(attachment.content)
            else:
                in_workspace, written = put_in_workspace(session, name, attachment.content)
                saved.append(written)
            file_parts.append((part_id, attachment, file_url(session.pk, part_id), in_workspace))
        # Before the transaction: it may start MCP servers.
        own_blocks = agent_blocks(agent, mcp_listing)
        # One transaction: the lease, any recovery it calls for, and the prompt's
        # events as one batch. The lease is counted from before it.
        lease_asked_at = time.monotonic()
        with transaction.atomic():
            if lease.acquire(session=session, message_id=assistant_id) is not None:
                finalize_dead_turn(session)  # an expired lease: its runner died
            hold_budget(session, speaker, budgets, model)
            # Calls still waiting for an answer are denied, and their reply completed,
            # before the new prompt (docs/approvals.md).
            deny_for_new_prompt(session)
            current = blocks_in_force(session)  # one read for both
            blocks = blocks_update(
                session,
                [
                    *own_blocks,
                    *memory_blocks(session, agent.name, speaker, depth=depth, current=current),
                ],
                current=current,
            )
            user = services.UpdateMessage(
                info={
                    "id": user_id,
                    "role": "user",
                    "agent": agent.name,
                    "model": model_of_messages,
                    **speaker_field(speaker),
                }
            )
            parts = [
                services.UpdatePart(part=part)
                for part in _user_parts(user_id, text, agent, mentioned, file_parts)
            ]
            reply = reply_message(
                message_id=assistant_id,
                parent_id=user_id,
                agent=agent,
                model=model_of_messages,
                speaker=speaker,
            )
            events = services.append_batch(
                session=session, writes=[*([blocks] if blocks else []), user, *parts, reply]
            )
            logged = events[-len(parts) - 2 : -1]
            user_info, user_parts = logged[0].data, [event.data for event in logged[1:]]
    except BaseException:
        for path in stored:
            default_storage.delete(path)
        for written in saved:
            written.unlink(missing_ok=True)
        raise
    turn = Turn(
        session=session,
        user_message_id=user_id,
        message_id=assistant_id,
        agent=agent,
        model=model,
        depth=depth,
        speaker=speaker,
        lease_asked_at=lease_asked_at,
    )
    return turn, {"info": user_info, "parts": user_parts}
