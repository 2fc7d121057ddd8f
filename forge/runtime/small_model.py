"""One question to ``FORGE_SMALL_MODEL``, one text answer: for titles, dialogue
summaries for long-term memory, and compaction summaries. A dialogue summary is billed
(usage, budgets) to the memory's user and agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from forge.providers import events as ev
from forge.providers import resolve, split_model
from forge.providers.base import ModelRequest
from forge.usage.services import record_side_call
from memory.normalize import SUMMARY_MAX
from memory.summarizers import extractive, summary_for

from .model_calls import price


class SmallModelError(Exception):
    """The model answered with an error, or with a tool call instead of text.
    ``overflow``: the error said the request did not fit the model's window."""

    def __init__(self, message: str, *, overflow: bool = False) -> None:
        super().__init__(message)
        self.overflow = overflow


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
                raise SmallModelError(
                    ev.without_nul(f"{event.name}: {event.message}"), overflow=event.overflowed
                )
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


# --- a transcript that fits the model's window ------------------------------------------

FIT_FLOOR = 2_000  # characters: a transcript is never cut below this, however small the window
_LEFT_OUT = "[… {count} lines of the conversation left out here to fit the model's window …]"


def window_chars(model: str) -> int:
    """The characters of input ``model`` takes: its window (``FORGE_CONTEXT_LIMITS``, else
    ``FORGE_CONTEXT_LIMIT_DEFAULT``) less the output reserve (at most half of it), at four
    characters a token, the estimate compaction uses for the main model."""
    limits: Mapping[str, int] = settings.FORGE_CONTEXT_LIMITS
    limit = int(limits.get(model, settings.FORGE_CONTEXT_LIMIT_DEFAULT))
    return max(limit - min(int(settings.FORGE_OUTPUT_RESERVE), limit // 2), 1) * 4


def fit_lines(lines: Sequence[str], budget: int) -> str:
    """``lines`` joined by newlines, in at most ``budget`` characters (never under
    :data:`FIT_FLOOR`): whole when they fit; else the first line (the goal, or the
    summary an earlier compaction left) cut to a third of the budget, then the newest
    lines that fit (each cut to a quarter), with a line saying how many were left out
    between them. The oldest turns matter least to what comes next; the first line
    says what the conversation is about."""
    budget = max(budget, FIT_FLOOR)
    whole = "\n".join(lines)
    if len(whole) <= budget or not lines:
        return whole
    head = _cut(lines[0], budget // 3)
    room = budget - len(head) - len(_LEFT_OUT) - 20  # (the count's digits, newlines)
    tail: list[str] = []
    for line in reversed(lines[1:]):
        line = _cut(line, budget // 4)
        if len(line) + 1 > room:
            break
        tail.append(line)
        room -= len(line) + 1
    tail.reverse()
    left_out = len(lines) - 1 - len(tail)
    middle = [_LEFT_OUT.format(count=left_out)] if left_out else []
    return "\n".join([head, *middle, *tail])


def _cut(line: str, cap: int) -> str:
    return line if len(line) <= cap else line[: max(cap - 2, 0)] + " …"


async def ask_within_window(
    system: str, lines: Sequence[str], *, after: str = "", model: str | None = None
) -> Answer:
    """:func:`ask` with ``lines`` (a transcript, oldest first) fitted to the model's
    window (:func:`window_chars`, :func:`fit_lines`), then ``after``. When the model
    still says the request is over its window (a window smaller than configured, a
    tokenizer that counts more than four characters a token), the transcript is cut to
    half of what was sent and asked again, down to :data:`FIT_FLOOR`. Before, a
    transcript past the summary model's window failed every compaction, and so every
    later turn of the session, for good (QA)."""
    model = model or settings.FORGE_SMALL_MODEL
    budget = window_chars(model) - len(system) - len(after)
    while True:
        content = fit_lines(lines, budget)
        try:
            return await ask(system, content + after, model=model)
        except SmallModelError as exc:
            if not exc.overflow or len(content) <= FIT_FLOOR:
                raise
            budget = len(content) // 2


MAX_PIECES = 8  # of one transcript summarized in pieces (each message cut to fit them)
LINE_FLOOR = 80  # characters a message keeps however many there are (more pieces then)


def pieces(lines: Sequence[str], budget: int) -> list[list[str]]:
    """``lines`` in consecutive groups of at most ``budget`` characters each (joined), in
    order, none left out; each line first cut so that all of them fit about
    :data:`MAX_PIECES` groups (and one group), never under :data:`LINE_FLOOR`
    characters (a dialogue of more messages than that allows takes more pieces)."""
    budget = max(budget, FIT_FLOOR)
    total = sum(len(line) + 1 for line in lines)
    cap = budget if total <= budget * MAX_PIECES else budget * MAX_PIECES // max(len(lines), 1)
    cap = max(min(cap, budget - 1), LINE_FLOOR)
    groups: list[list[str]] = []
    size = 0
    for line in (_cut(line, cap) for line in lines):
        if not groups or size + len(line) + 1 > budget:
            groups.append([])
            size = 0
        groups[-1].append(line)
        size += len(line) + 1
    return groups


PIECES_AT_ONCE = 4  # pieces asked side by side


async def ask_in_pieces(
    system: str,
    lines: Sequence[str],
    *,
    after: str = "",
    model: str | None = None,
    answered: Callable[[Answer], None] | None = None,
) -> list[Answer]:
    """:func:`ask` for each of the :func:`pieces` of ``lines`` that fit the model's window:
    every line is in one piece, none is left out; the answers in the pieces' order. A
    piece the model still refuses as over its window is split in two and each asked
    (down to :data:`FIT_FLOOR`). Up to :data:`PIECES_AT_ONCE` are asked side by side
    (one after another, eight pieces outlasted the summarizer's timeout: review);
    ``answered`` is called with each answer as it comes (its usage is billed then, even
    if a later piece fails). For memory's summaries, which stand for every turn they
    cover: a transcript fitted by leaving its middle out (:func:`fit_lines`) made the
    rolled turns of that middle vanish from what the model is sent (QA)."""
    model = model or settings.FORGE_SMALL_MODEL
    budget = window_chars(model) - len(system) - len(after)
    limit = asyncio.Semaphore(PIECES_AT_ONCE)

    async def one(piece: list[str]) -> list[Answer]:
        content = "\n".join(piece)
        try:
            async with limit:
                answer = await ask(system, content + after, model=model)
        except SmallModelError as exc:
            if not exc.overflow or len(content) <= FIT_FLOOR:
                raise
            halves = await asyncio.gather(*(one(p) for p in pieces(piece, len(content) // 2)))
            return [answer for half in halves for answer in half]
        if answered is not None:
            answered(answer)
        return [answer]

    done = await asyncio.gather(*(one(piece) for piece in pieces(lines, budget)))
    return [answer for piece in done for answer in piece]


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
    lines = [f"{m.get('role', 'user')}: {m.get('text', '')}" for m in messages]
    who = summary_for()
    billed: list[Answer] = []  # every answer that came, billed even if a later one failed

    async def summarized() -> list[Answer]:
        # In pieces when the dialogue is over the model's window, within the summarizer's
        # own deadline: past it, the roller has given up on this thread, which then
        # stops too instead of asking (and billing) on.
        deadline = float(getattr(settings, "FORGE_MEMORY_SUMMARIZER_TIMEOUT", 0) or 0)
        async with asyncio.timeout(deadline if deadline > 0 else None):
            return await ask_in_pieces(SUMMARY_PROMPT, lines, model=model, answered=billed.append)

    try:
        answers = asyncio.run(summarized())
    finally:
        for answer in billed:
            if who is not None and any(answer.usage.as_tokens().values()):
                record_side_call(  # no log records this call: usage and budgets count it here
                    tenant_id=who.tenant_id,
                    user_id=who.user_id,
                    agent=who.agent,
                    model=model,
                    tokens=answer.usage.as_tokens(),
                    cost=price(model, answer.usage),
                )
    texts = [answer.text for answer in answers if answer.text]
    # Each piece's summary gets its share of what a slice stores (``SUMMARY_MAX``): joined
    # whole, the newest pieces' summaries were cut off by the store (QA).
    share = SUMMARY_MAX // max(len(texts), 1) - 1
    return "\n".join(text if len(text) <= share else text[: share - 1] + "…" for text in texts)
