"""A title for a new session, from the small model, after the first exchange."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings

from forge.db.worker import db
from forge.providers import events as ev
from forge.usage.services import record_side_call
from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.models import Session

from .model_calls import price
from .small_model import SmallModelError, ask

logger = logging.getLogger(__name__)

PROMPT = (
    "Write a title for the conversation that starts with the user's message below: "
    "at most eight words, no quotes, no trailing punctuation. Reply with the title only."
)
MAX_TITLE = 80  # characters
MAX_WORDS = 10
QUOTES = "\"' \u201c\u201d\u2018\u2019"  # straight and curly quotes, and spaces


@dataclass(frozen=True)
class Exchange:
    """The session's first exchange: what the title is made from, and whom it bills."""

    text: str  # the user's message
    speaker: int | None  # the user the reply records (None: none logged)
    agent: str  # the agent that answered


def _first_exchange(session: Session) -> Exchange | None:
    """The first user message's text, and who spoke to which agent, once the session has
    a reply and no title.

    Not only after exactly one reply: a first turn that crashed or was aborted before
    its title came left the session "Untitled" for good (QA). A titled session costs
    this one read; an untitled one gets its title at the end of its next turn."""
    session.refresh_from_db(fields=["title"])
    if session.title:
        return None
    if selectors.count_assistant_messages(tenant=session.tenant, session=session) < 1:
        return None
    text: str | None = None
    for item in selectors.iter_history(tenant=session.tenant, session_id=session.pk):
        info = item["info"]
        if info["role"] == "user" and text is None:
            texts = [
                p["text"] for p in item["parts"] if p["type"] == "text" and not p.get("synthetic")
            ]
            text = "\n".join(texts)
        elif info["role"] == "assistant" and text is not None:
            speaker = info.get("user_id")
            return Exchange(
                text=text,
                speaker=speaker if isinstance(speaker, int) else session.user_id,
                agent=str(info.get("agent") or ""),
            )
    return None if text is None else Exchange(text=text, speaker=session.user_id, agent="")


def _count_call(session: Session, exchange: Exchange, usage: ev.Usage) -> None:
    """Count the title's model call in usage (and so in budgets): the session's log does
    not record it (``forge.usage.services.record_side_call``)."""
    if exchange.speaker is None or not any(usage.as_tokens().values()):
        return
    model = settings.FORGE_SMALL_MODEL
    record_side_call(
        tenant_id=session.tenant_id,
        user_id=exchange.speaker,
        agent=exchange.agent,
        model=model,
        tokens=usage.as_tokens(),
        cost=price(model, usage),
    )


def clean_title(raw: str, fallback: str) -> str:
    line = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")
    line = line.strip(QUOTES).rstrip(".!?:;")
    if not line:
        line = fallback
    line = " ".join(line.split()[:MAX_WORDS])[:MAX_TITLE].strip().rstrip(".,!?:;")
    return line or "Untitled"


def _set_title(session: Session, title: str) -> None:
    """Title the session unless it has a title, or is gone (deleted while the small
    model thought: nothing to title, and nothing wrong)."""
    try:
        session.refresh_from_db(fields=["title"])
        if not session.title:
            services.update_session(session=session, title=title)
    except (Session.DoesNotExist, NotFound):
        logger.debug("session %s was deleted before its title came", session.pk)


async def generate_title(session: Session) -> str | None:
    exchange = await db(_first_exchange)(session)
    if exchange is None or not exchange.text:
        return None
    text = exchange.text
    try:
        asked = await ask(PROMPT, text, whole=False)
    except SmallModelError:
        answer = ""
    else:
        answer = asked.text
        await db(_count_call)(session, exchange, asked.usage)
    title = clean_title(answer, fallback=text)
    await db(_set_title)(session, title)
    return title


async def title_later(session: Session) -> None:
    """:func:`generate_title`, for a background task: a failure is logged, never raised."""
    try:
        await generate_title(session)
    except Exception:
        logger.exception("could not title session %s", session.pk)
