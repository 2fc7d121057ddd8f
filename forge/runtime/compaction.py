"""Compaction: when the context is about to overflow, the older history is replaced,
for the model, by a summary behind a boundary (``forge.context.compacted``).

* :func:`over_limit`: the last step's reported usage, or an estimate of the
  request's size, against the model's context limit minus an output reserve
  (``FORGE_CONTEXT_LIMITS`` / ``FORGE_CONTEXT_LIMIT_DEFAULT``, or the agent's
  ``context_limit``);
* :func:`plan`: what is summarized and which recent turns stay verbatim (the
  kept tail); refuses an empty session and a session with no progress since
  its last boundary (no compaction loops);
* :func:`summarize`: ``FORGE_SMALL_MODEL`` writes the summary from a
  structured template; the offline models write an extractive one, so
  everything runs offline;
* :func:`compact`: plan, summarize, then log the boundary in one unit of work
  (``forge.context.boundary``). A summary that fails writes nothing.

The run loop compacts automatically (``steps``); ``compact_session`` is the manual
entry (the ``compact/`` route and the ``compact_session`` command), run under
the session's lease like a turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from forge.context import derive_messages, visible_history
from forge.context.boundary import record_compaction
from forge.context.compacted import compaction_part
from forge.context.incremental import ContextCacheMismatch
from forge.context.rolled import BLOCK as ROLLED_BLOCK_KEY
from forge.context.rolled import rolled_kept, rolled_through
from forge.context.visible import visible_history as visible_from_log
from forge.db.worker import db
from forge.errors import CompactionFailed, NothingToCompact, SessionBusy, UnknownModel
from forge.providers import events as ev
from forge.providers import split_model
from forge.providers.base import ModelRequest
from forge.usage.budgets import check_budget
from forge.usage.services import record_summary
from sessions import bus, selectors, services
from sessions.frames import error_frame
from sessions.ids import new_message_id
from sessions.models import Session
from sessions.projector import fold_context

from . import lease
from .agents import AgentConfig, default_agent, get_agent
from .approvals.pending import any_waiting
from .finalize import message_error
from .model_calls import price
from .small_model import ask_within_window

logger = logging.getLogger(__name__)

OVERFLOW_ERROR = ev.OVERFLOW_ERROR

SUMMARY_SYSTEM = (
    "You summarize a conversation between a user and an AI coding assistant so that "
    "the assistant can continue the work from the summary alone. Answer with exactly "
    "these sections, in Markdown, concise and concrete:\n"
    "## Goal\n## Constraints\n## Progress\n## Decisions\n## Next steps\n## Relevant files"
)
SUMMARY_ASK = "Summarize the conversation above using the template."
_TRANSCRIPT_CAP = 2_000  # characters of one message kept in the summary's transcript


# --- limits ---------------------------------------------------------------------------


def context_limit(model: str, agent: AgentConfig) -> int:
    if agent.context_limit:
        return int(agent.context_limit)
    limits: Mapping[str, int] = settings.FORGE_CONTEXT_LIMITS
    return int(limits.get(model, settings.FORGE_CONTEXT_LIMIT_DEFAULT))


def auto_enabled(agent: AgentConfig) -> bool:
    if agent.auto_compact is not None:
        return bool(agent.auto_compact)
    return bool(settings.FORGE_AUTO_COMPACT)


def estimate_tokens(request: ModelRequest) -> int:
    """A rough token count of a request: the characters of its JSON / 4.

    Exactly ``len(json.dumps(request.as_dict(), ensure_ascii=False)) // 4``. When the
    request knows its messages' JSON length (``messages_chars``: the context cache keeps
    each message's) and the rest's (``rest_chars``: the tools' schemas and the system
    prompt, kept until a context block changes), nothing is encoded: the history and
    the tools are not encoded again before every step.
    ``FORGE_CONTEXT_VERIFY`` (the tests) checks the shortcut against the full encoding."""
    if request.messages_chars is None:
        return len(json.dumps(request.as_dict(), ensure_ascii=False)) // 4
    rest = request.rest_chars
    if rest is None:
        rest = len(json.dumps({**request.as_dict(), "messages": []}, ensure_ascii=False))
    chars = rest - len("[]") + request.messages_chars
    if settings.FORGE_CONTEXT_VERIFY:
        full = len(json.dumps(request.as_dict(), ensure_ascii=False))
        if full != chars:
            raise ContextCacheMismatch(f"known lengths: {chars} characters, encoded {full}")
    return chars // 4


def usable(model: str, agent: AgentConfig) -> int:
    limit = context_limit(model, agent)
    return max(limit - min(int(settings.FORGE_OUTPUT_RESERVE), limit // 2), 1)


def over_limit(
    request: ModelRequest, *, model: str, agent: AgentConfig, usage: ev.Usage | None
) -> bool:
    """The last step's reported usage (input + output) or, whichever is larger, the
    estimate of the request about to be sent, reaches the usable window."""
    used = estimate_tokens(request)
    if usage is not None:
        used = max(used, usage.input + usage.output)
    return used >= usable(model, agent)


def is_provider_overflow(error: ev.Error) -> bool:
    """A provider's error saying the request does not fit the model's window
    (:attr:`~forge.providers.events.Error.overflowed`)."""
    return error.overflowed


def overflow_error(message: str) -> dict[str, Any]:
    return message_error(OVERFLOW_ERROR, message)


# --- what is summarized -----------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    to_summarize: list[dict[str, Any]]
    tail_start_id: str | None


def _size(items: Sequence[Mapping[str, Any]]) -> int:
    return len(json.dumps(derive_messages(items), ensure_ascii=False)) // 4


def plan(session: Session, *, keep_from: str | None = None) -> Plan:
    """What a compaction summarizes, and where the kept tail starts.

    The tail is whole turns (it starts at a user prompt after the last boundary),
    newest first while they fit ``FORGE_COMPACT_TAIL_TOKENS``; ``keep_from`` (the
    prompt of a turn being compacted in the middle) is always kept. Raises
    ``NothingToCompact`` for an empty session, for no progress since the last
    boundary, and when nothing older than the tail is left to summarize.
    """
    tenant = session.tenant
    visible = visible_history(session)
    others = _view_without_the_cut(session, visible)
    if others is not None:
        visible = visible_from_log(session, others)
    if not visible:
        raise NothingToCompact("the session is empty: there is nothing to compact")
    if not selectors.progress_since_compaction(tenant=tenant, session=session):
        raise NothingToCompact("nothing happened since the last compaction")
    marker = selectors.last_compaction(tenant=tenant, session=session) or {}
    previous = {marker.get("parent_id"), marker.get("message_id")} - {None}
    newer_than = str(marker.get("message_id") or "")

    def meaningful(items: Sequence[Mapping[str, Any]]) -> bool:
        return any(item["info"]["id"] not in previous for item in items)

    positions = [
        index
        for index, item in enumerate(visible)
        if item["info"]["role"] == "user"
        and compaction_part(item["parts"]) is None
        and str(item["info"]["id"]) > newer_than
    ]
    budget = int(settings.FORGE_COMPACT_TAIL_TOKENS)
    chosen: int | None = None
    for index in reversed(positions):
        if not meaningful(visible[:index]):
            break
        required = keep_from is not None and str(visible[index]["info"]["id"]) >= keep_from
        if not required and _size(visible[index:]) > budget:
            break
        chosen = index
    if keep_from is not None and (chosen is None or str(visible[chosen]["info"]["id"]) > keep_from):
        raise NothingToCompact("the current turn alone is all there is to keep")
    to_summarize = visible[:chosen] if chosen is not None else visible
    if not meaningful(to_summarize):
        raise NothingToCompact("nothing older than the recent turns is left to summarize")
    tail = str(visible[chosen]["info"]["id"]) if chosen is not None else None
    return Plan(to_summarize=to_summarize, tail_start_id=tail)


def _view_without_the_cut(
    session: Session, visible: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The context blocks whose view a compaction summarizes when not the model's (None:
    the model's, from the cache): for a session of several agents or speakers (memory's
    block keeps messages of others in view below its cut, ``rolled_kept``, or the view
    holds turns of more than one agent or speaker: a review finding, another member's
    turns above the cut), those in force without memory's block, so without its cut.
    ``visible``: the model's view. The boundary hides what it summarized from every
    agent's and speaker's view, and the others' blocks do not hold what this core
    rolled: summarized from this view alone, their models lost those turns (QA, HIGH).
    The core's own rolled turns are then in the summary and in its block both. A
    session of one agent and speaker summarizes what the cut left."""
    blocks = fold_context(selectors.context_updates(tenant=session.tenant, session=session))
    if rolled_through(blocks) is None:
        return None
    if not rolled_kept(blocks) and not _several_speakers(visible):
        return None
    return {key: block for key, block in blocks.items() if key != ROLLED_BLOCK_KEY}


def _several_speakers(items: Sequence[Mapping[str, Any]]) -> bool:
    """Whether these messages hold turns of more than one agent or speaker (those that
    name a speaker; a compaction's request and summary name none)."""
    who = {
        (item["info"].get("agent"), str(item["info"]["user_id"]))
        for item in items
        if item["info"].get("user_id") is not None and not item["info"].get("summary")
    }
    return len(who) > 1


# --- the summary ------------------------------------------------------------------------


def _clip(text: str, cap: int = _TRANSCRIPT_CAP) -> str:
    text = text.strip()
    return text if len(text) <= cap else text[:cap] + " …"


def transcript(items: Sequence[Mapping[str, Any]]) -> str:
    """The history to summarize as plain text, one line per message or tool call."""
    return "\n".join(transcript_lines(items))


def transcript_lines(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """:func:`transcript`'s lines, oldest first."""
    lines: list[str] = []
    for message in derive_messages(items):
        role = message["role"]
        if role == "tool":
            lines.append(f"tool result: {_clip(str(message.get('content', '')))}")
            continue
        if message.get("content"):
            lines.append(f"{role}: {_clip(str(message['content']))}")
        for call in message.get("tool_calls", []):
            function = call["function"]
            lines.append(f"tool call: {function['name']} {_clip(function['arguments'], 300)}")
    return lines


def _files(items: Sequence[Mapping[str, Any]]) -> list[str]:
    found: list[str] = []
    for item in items:
        for part in item["parts"]:
            name = None
            if part.get("type") == "file":
                name = part.get("filename")
            elif part.get("type") == "tool":
                value = (part.get("state") or {}).get("input", {})
                name = value.get("path") if isinstance(value, dict) else None
            if isinstance(name, str) and name and name not in found:
                found.append(name)
    return found


def extractive_summary(items: Sequence[Mapping[str, Any]]) -> str:
    """The template filled from the history's own words (the offline models' summary)."""
    messages = derive_messages(items)
    users = [str(m["content"]) for m in messages if m["role"] == "user" and m.get("content")]
    replies = [str(m["content"]) for m in messages if m["role"] == "assistant" and m.get("content")]
    rules = [
        sentence.strip()
        for text in users
        for sentence in re.split(r"(?<=[.!?])\s+", text)
        if re.search(r"\b(must|never|always|don't|do not|only)\b", sentence, re.IGNORECASE)
    ]
    progress = [f"- user: {_clip(text, 200)}" for text in users[-5:]]
    progress += [f"- assistant: {_clip(text, 200)}" for text in replies[-5:]]
    files = _files(items)
    sections = [
        ("Goal", _clip(users[0], 400) if users else "(not stated)"),
        ("Constraints", "\n".join(f"- {_clip(r, 200)}" for r in rules[:5]) or "(none stated)"),
        ("Progress", "\n".join(progress) or "(none yet)"),
        ("Decisions", _clip(replies[-1], 400) if replies else "(none yet)"),
        ("Next steps", _clip(users[-1], 400) if users else "(none stated)"),
        ("Relevant files", "\n".join(f"- {name}" for name in files) or "(none)"),
    ]
    return "\n\n".join(f"## {title}\n{body}" for title, body in sections)


async def summarize(
    items: Sequence[Mapping[str, Any]], *, model: str | None = None
) -> tuple[str, ev.Usage]:
    """The summary of ``items`` by ``FORGE_SMALL_MODEL``; ``CompactionFailed`` when the
    model fails or returns nothing."""
    model = model or settings.FORGE_SMALL_MODEL
    try:
        provider_name, _ = split_model(model)
    except UnknownModel as exc:
        raise CompactionFailed(f"the summary model: {exc}") from None
    if provider_name == "offline":
        summary = extractive_summary(items)
        return summary, ev.Usage(input=_size(items), output=len(summary) // 4)
    try:
        answer = await ask_within_window(
            SUMMARY_SYSTEM, transcript_lines(items), after=f"\n\n{SUMMARY_ASK}", model=model
        )
    except UnknownModel as exc:
        raise CompactionFailed(f"the summary model: {exc}") from None
    except Exception as exc:  # the model's error, a tool call, a dropped connection
        raise CompactionFailed(f"the summary model failed: {type(exc).__name__}: {exc}") from exc
    if not answer.text:
        raise CompactionFailed("the summary model returned nothing")
    return answer.text, answer.usage


# --- compacting -------------------------------------------------------------------------


async def compact(
    session: Session,
    *,
    auto: bool,
    overflow: bool,
    agent: str = "",
    keep_from: str | None = None,
    speaker_id: int | None = None,
) -> dict[str, Any]:
    """Plan, summarize and log one boundary; returns its marker. The caller holds the
    session's lease. ``NothingToCompact`` / ``CompactionFailed``: nothing written.
    ``speaker_id``: the user whose turn compacts, billed for the summary (None: the
    session's owner, as a manual compaction is)."""
    chosen = await db(plan)(session, keep_from=keep_from)
    summary, usage = await summarize(chosen.to_summarize)
    return dict(
        await db(record_compaction)(
            session,
            summary=summary,
            auto=auto,
            overflow=overflow,
            tail_start_id=chosen.tail_start_id,
            model=settings.FORGE_SMALL_MODEL,
            agent=agent,
            tokens=usage.as_tokens(),
            cost=price(settings.FORGE_SMALL_MODEL, usage),
            on_summary=lambda info: record_summary(session=session, info=info),
            speaker_id=speaker_id,
        )
    )


def prepare_manual(session: Session, requester_id: int | None = None) -> str:
    """Check that the session can be compacted now and take its lease (one unit of
    work): ``NothingToCompact`` (400), ``SessionBusy`` (409: a turn runs, or a reply
    waits for its tool calls to be answered) or ``BudgetExceeded`` (429), nothing
    written. The summary is billed to the session's owner; ``requester_id``, the member
    asking for it, must be within budget too (QA: a member over budget compacted a
    teammate's session, spending on the owner's budget).
    Returns the lease's placeholder id."""
    placeholder = new_message_id()
    with transaction.atomic():
        if any_waiting(session):
            # A reply suspended on its calls is open: a boundary now would leave its
            # prompt, calls and results behind it, and the model would go on without
            # them once the calls are answered.
            raise SessionBusy(
                "a reply waits for tool calls to be approved or denied: answer them "
                "(or send a prompt, which denies them) before compacting"
            )
        # A summary is a model call: a tenant (or owner) whose monthly budget is used
        # up gets 429 budget_exceeded here too, as a prompt does.
        # (No owner left: the tenant's budget alone; no user has id 0.)
        check_budget(tenant=session.tenant, user_id=session.user_id or 0)
        if requester_id is not None and requester_id != session.user_id:
            check_budget(tenant=session.tenant, user_id=requester_id)
        if lease.acquire(session=session, message_id=placeholder) is not None:
            # An expired lease: its runner died. Finalized as every next holder does,
            # its cut step billed and its streamed text kept (recovery sits above this
            # module): this path closed the reply with neither (QA).
            from .recovery import finalize_dead_turn

            finalize_dead_turn(session)
        plan(session)
    return placeholder


def _agent_of(session: Session) -> AgentConfig:
    try:
        return get_agent(session.agent) if session.agent else default_agent()
    except Exception:
        return default_agent()


async def run_manual(session: Session) -> dict[str, Any]:
    """Compact a session whose lease :func:`prepare_manual` took; releases it. The
    session is ``busy`` meanwhile; a failure is published as an error frame."""
    await services.apublish_status(session_id=session.pk, status="busy")

    async def heartbeat() -> None:
        while True:
            await asyncio.sleep(lease.renewal_interval())
            await db(lease.renew)(session_id=session.pk, tenant_id=session.tenant_id)

    beat = asyncio.ensure_future(heartbeat())
    try:
        agent = await db(_agent_of)(session)
        return await compact(session, auto=False, overflow=False, agent=agent.name)
    except Exception as exc:
        code = getattr(exc, "code", "compaction_failed")
        await bus.apublish(session.pk, error_frame(code, str(exc), session_id=session.pk))
        raise
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        await asyncio.shield(db(lease.release)(session_id=session.pk, tenant_id=session.tenant_id))
        await services.apublish_status(session_id=session.pk, status="idle")
