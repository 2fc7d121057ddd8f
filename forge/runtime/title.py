"""A title for a new session, from the small model, after the first exchange."""

from __future__ import annotations

import logging

from forge.db.worker import db
from sessions import selectors, services
from sessions.exceptions import NotFound
from sessions.models import Session

from .small_model import SmallModelError, ask

logger = logging.getLogger(__name__)

PROMPT = (
    "Write a title for the conversation that starts with the user's message below: "
    "at most eight words, no quotes, no trailing punctuation. Reply with the title only."
)
MAX_TITLE = 80  # characters
MAX_WORDS = 10
QUOTES = "\"' \u201c\u201d\u2018\u2019"  # straight and curly quotes, and spaces


def _first_user_text(session: Session) -> str | None:
    """The first user message's text, if the session has had exactly one exchange."""
    session.refresh_from_db(fields=["title"])
    if session.title:
        return None
    if selectors.count_assistant_messages(tenant=session.tenant, session=session) != 1:
        return None
    for item in selectors.iter_history(tenant=session.tenant, session_id=session.pk):
        if item["info"]["role"] == "user":
            texts = [
                p["text"] for p in item["parts"] if p["type"] == "text" and not p.get("synthetic")
            ]
            return "\n".join(texts)
    return None


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
    text = await db(_first_user_text)(session)
    if not text:
        return None
    try:
        answer = (await ask(PROMPT, text)).text
    except SmallModelError:
        answer = ""
    title = clean_title(answer, fallback=text)
    await db(_set_title)(session, title)
    return title


async def title_later(session: Session) -> None:
    """:func:`generate_title`, for a background task: a failure is logged, never raised."""
    try:
        await generate_title(session)
    except Exception:
        logger.exception("could not title session %s", session.pk)
