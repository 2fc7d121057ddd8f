"""One question to ``FORGE_SMALL_MODEL``, one text answer: for titles, dialogue
summaries for long-term memory, and compaction summaries. A dialogue summary is billed
(usage, budgets) to the memory's user and agent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from forge.providers import events as ev
from forge.providers import resolve, split_model
from forge.providers.base import ModelRequest
from forge.usage.services import record_side_call
from memory.summarizers import extractive, summary_for

from .model_calls import price


class SmallModelError(Exception):
    """The model answered with an error, or with a tool call instead of text."""


# Finish reasons of an answer that stopped before its end.
CUT_SHORT = frozenset({"length", "content-filter"})


@dataclass(frozen=True)
class Answer:
    text: str  # stripped
    usage: ev.Usage


async def ask(system: str, content: str, *, model: str | None = None, whole: bool = True) -> Answer:
    """What the small model (or ``model``) answers to ``content`` under ``system``.

    Raises ``UnknownModel`` for a model string no provider serves, and
    ``SmallModelError`` when the model fails or calls a tool, or, with ``whole``,
    when its answer was cut short (``length``, ``content-filter``): a summary cut so
    would take the place of what it summarizes (QA). A title needs no ``whole``.
    """
    model = model or settings.FORGE_SMALL_MODEL
    _, name = split_model(model)
    request = ModelRequest(
        model=name, system=[system], messages=[{"role": "user", "content": content}]
    )
    provider = resolve(model)
    chunks: list[str] = []
    usage = ev.Usage()
    stream = provider.stream(request)
    try:
        async for event in stream:
            if isinstance(event, ev.TextDelta):
                chunks.append(event.delta)
            elif isinstance(event, ev.Error):
                raise SmallModelError(ev.without_nul(f"{event.name}: {event.message}"))
            elif isinstance(event, ev.ToolCall):
                raise SmallModelError("the model called a tool instead of answering")
            elif isinstance(event, ev.FinishStep):
                if whole and event.finish_reason in CUT_SHORT:
                    raise SmallModelError(
                        f"the model's answer was cut short ({event.finish_reason})"
                    )
                usage = event.usage
                break
    finally:
        for close in (getattr(stream, "aclose", None), getattr(provider, "aclose", None)):
            if close is not None:
                await close()
    # The answer becomes a title or a summary in the log, which stores no NUL.
    return Answer(text=ev.without_nul("".join(chunks)).strip(), usage=usage)


SUMMARY_PROMPT = (
    "You keep the long-term memory of a conversation between a user and an assistant. "
    "Summarize the dialogue below for your future self in at most eight short sentences: "
    "who the user is and what they want, facts and preferences they stated, decisions "
    "made, open questions. Write plain sentences, no preamble."
)


def summarize_dialogue(messages: Sequence[Mapping[str, Any]]) -> str:
    """Memory's MessageSummarizer (``FORGE_MEMORY_SUMMARIZER``): a summary of compressed
    dialogue messages by ``FORGE_SMALL_MODEL``; offline models give memory's
    extractive summary. Runs on the roller's worker thread (no event loop there)."""
    model = settings.FORGE_SMALL_MODEL
    provider, _ = split_model(model)
    if provider == "offline":
        return extractive(messages)
    transcript = "\n".join(f"{m.get('role', 'user')}: {m.get('text', '')}" for m in messages)
    answer = asyncio.run(ask(SUMMARY_PROMPT, transcript, model=model))
    who = summary_for()
    if who is not None and any(answer.usage.as_tokens().values()):
        record_side_call(  # no log records this call: usage (and budgets) count it here
            tenant_id=who.tenant_id,
            user_id=who.user_id,
            agent=who.agent,
            model=model,
            tokens=answer.usage.as_tokens(),
            cost=price(model, answer.usage),
        )
    return answer.text
