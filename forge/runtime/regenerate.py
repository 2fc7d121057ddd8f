"""Regenerating the last reply: the same prompt answered again, as a new message.

The log is append-only, so a regenerated reply never rewrites the old one: it
is a *new* assistant message whose ``parent_id`` is the same user message. The
old reply stays in the log, superseded; the model sees the newest reply to each
prompt only (``forge.context.superseded``), and so does the AI SDK's message
history (``forge.aisdk``). Only the chat's last reply can be regenerated: one
that later turns built on would leave them answering a reply nobody sees. A chat
whose last message is a prompt with no reply (a fork at a reply) has that prompt
answered: nothing is superseded.

:func:`begin_regeneration` is one unit of work, like ``prompting.begin``: take the
session's lease (recovering a dead runner's turn if its lease had expired), check
that there is a last reply (and that ``message_id``, when given, names it or its
prompt), log the context blocks that changed and the empty assistant message
the new reply will fill (one batch). A refusal raises before anything is written.
"""

from __future__ import annotations

import time
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from forge.context.blocks import blocks_in_force, blocks_update
from forge.context.superseded import is_reply
from forge.errors import (
    InvalidPrompt,
    NothingToRegenerate,
    NotLastReply,
    UnknownAgent,
)
from forge.tools import mcp
from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.ids import is_valid_id, new_message_id
from sessions.models import Session

from . import lease
from .agents import AgentConfig, default_agent, get_agent
from .approvals.pending import deny_for_new_prompt
from .dialogue import memory_blocks
from .prompting import (
    agent_blocks,
    check_speaker,
    hold_budget,
    model_info,
    reply_message,
    starting_check,
    within_budget,
)
from .recovery import finalize_dead_turn
from .turn import Turn


def _agent_named(name: Any) -> AgentConfig:
    """The agent that answered the prompt (the default one when it had no name)."""
    fallback = default_agent()
    if not isinstance(name, str) or not name or name == fallback.name:
        return fallback
    return get_agent(name)  # UnknownAgent: it was removed since


# Compaction summaries a turn may have logged after its reply opened, looked past.
SUMMARIES_PAST = 8


def _last_reply(session: Session) -> dict[str, Any] | None:
    """The chat's last reply ``{info, parts}``, or None when there is none to regenerate.

    The newest assistant message that answers a prompt. Compaction summaries newer
    than it are looked past when each kept its prompt in the verbatim tail: a turn
    whose request overflowed compacts mid-turn, and its summary is logged after the
    reply opened. A summary holding the reply (its tail starts after the prompt, or it
    kept none) leaves nothing to regenerate: the new reply would follow a summary of
    the one it replaces."""
    newer_tails: list[Any] = []
    for item in selectors.newest_messages(
        tenant=session.tenant, session=session, role="assistant", limit=SUMMARIES_PAST + 1
    ):
        info = item["info"]
        if is_reply(info):
            prompt = str(info["parent_id"])
            kept = all(tail is not None and str(tail) <= prompt for tail in newer_tails)
            return item if kept else None
        if not info.get("summary"):
            return None
        newer_tails.append(_tail_start(session, str(info.get("parent_id") or "")))
    return None


def _unanswered_prompt(session: Session) -> dict[str, Any] | None:
    """The chat's newest prompt ``{info, parts}`` when no reply follows it, else None.

    A fork at a reply ends with that reply's prompt, unanswered. Regenerating such a chat
    answered the prompt before it again, after the trailing one: the model was sent two
    prompts in a row and the first one's real answer was superseded (QA). The AI SDK's
    ``regenerate()`` with the user's message last asks for that message's answer, and
    that is what regenerating it gives. A compaction's request is no prompt."""
    newest = selectors.newest_messages(tenant=session.tenant, session=session, role="user", limit=1)
    if not newest or any(p["type"] == "compaction" for p in newest[0]["parts"]):
        return None
    prompt_id = str(newest[0]["info"]["id"])
    answered = selectors.message_after(tenant=session.tenant, session=session, message_id=prompt_id)
    return None if answered is not None else newest[0]


def _tail_start(session: Session, request_id: str) -> Any:
    """The ``tail_start_id`` of the compaction a summary answers (None: it kept no tail,
    or there is no such request)."""
    try:
        item = selectors.get_message(
            tenant=session.tenant, session_id=session.pk, message_id=request_id
        )
    except NotFound:
        return None
    return next((p.get("tail_start_id") for p in item["parts"] if p["type"] == "compaction"), None)


def _to_answer(session: Session, message_id: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``(the reply superseded or None, the prompt answered again)``, or the refusal.
    ``message_id``, when given, must name the reply or its prompt."""
    trailing = _unanswered_prompt(session)
    if trailing is not None:
        prompt_id = str(trailing["info"]["id"])
        if message_id is not None and message_id != prompt_id:
            raise NotLastReply(
                f"message {message_id!r} is not this chat's last prompt ({prompt_id}), "
                "which has no reply yet: only it can be answered"
            )
        return None, trailing
    last = _last_reply(session)
    if last is None:
        raise NothingToRegenerate(
            "this chat has no reply to regenerate (none, or a compaction summarized "
            "the last one); send a message"
        )
    old = last["info"]
    user_id = str(old["parent_id"])
    if message_id is not None and message_id not in (old["id"], user_id):
        raise NotLastReply(
            f"message {message_id!r} is not this chat's last reply ({old['id']}); "
            "only the last reply can be regenerated"
        )
    try:
        asked = selectors.get_message(
            tenant=session.tenant, session_id=session.pk, message_id=user_id
        )
    except NotFound:  # removed (a plugin's remove_message): 404 read as "no such chat"
        raise NothingToRegenerate(
            "the last reply's prompt was removed: there is nothing to answer again"
        ) from None
    return old, asked


def begin_regeneration(
    session: Session,
    message_id: Any = None,
    speaker: AbstractBaseUser | None = None,
    *,
    mcp_listing: mcp.Listing | None = None,
) -> tuple[Turn, dict[str, Any]]:
    """Take the lease and log a new, empty reply to the last reply's prompt.

    ``message_id`` (optional, the AI SDK's ``messageId``) must name the chat's last
    reply or its user message. ``speaker`` is the user asking for it (None: the
    session's owner): the new reply records them, and the turn's memory is theirs,
    whoever sent the prompt. Returns the turn to run and the user message
    ``{info, parts}``. Raises ``SessionBusy`` (a turn runs), ``NothingToRegenerate``
    (no reply to a prompt is the chat's last assistant message), ``NotLastReply``,
    ``InvalidPrompt`` (a malformed ``message_id``), ``UnknownAgent``, ``BudgetExceeded``:
    then nothing is written.
    """
    if message_id is not None and (not isinstance(message_id, str) or not is_valid_id(message_id)):
        raise InvalidPrompt("messageId must be a message id")
    speaker = check_speaker(session, speaker)
    budgets = within_budget(session, speaker)
    assistant_id = new_message_id()
    lease_asked_at = time.monotonic()  # the lease is counted from before its transaction
    with transaction.atomic():
        if lease.acquire(session=session, message_id=assistant_id) is not None:
            finalize_dead_turn(session)  # an expired lease: its runner died
        deny_for_new_prompt(session)  # calls waiting for an answer: as for a new prompt
        old, asked = _to_answer(session, message_id)
        user_id = str(asked["info"]["id"])
        try:
            agent = _agent_named(asked["info"].get("agent"))
        except UnknownAgent as exc:
            raise UnknownAgent(f"the agent that answered is gone: {exc}") from None
        # (Before any write: the transaction, the lease with it, is rolled back.)
        starting_check(agent, mcp_listing=mcp_listing)
        model = model_info(agent)  # InvalidPrompt: a model that is not configured
        hold_budget(session, speaker, budgets, agent.resolved_model)
        # The prompt answered again reaches the model even if memory rolled it.
        current = blocks_in_force(session)  # one read for both
        memory = memory_blocks(session, agent.name, speaker, keep_from=user_id, current=current)
        own = agent_blocks(agent, mcp_listing)
        blocks = blocks_update(session, [*own, *memory], current=current)
        reply = reply_message(
            message_id=assistant_id, parent_id=user_id, agent=agent, model=model, speaker=speaker
        )
        services.append_batch(session=session, writes=[*([blocks] if blocks else []), reply])
    turn = Turn(
        session=session,
        user_message_id=user_id,
        message_id=assistant_id,
        agent=agent,
        model=agent.resolved_model,
        supersedes=old,
        speaker=speaker,
        lease_asked_at=lease_asked_at,
    )
    return turn, asked
