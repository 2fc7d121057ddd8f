"""MessageSummarizer: a plain callable ``summarize(messages) -> str``.

``messages`` is the compressed increment, ``[{role, text, at}]`` oldest first
(see ``compressor``); the result is the slice's summary. The summarizer in
use is the dotted path in the setting ``FORGE_MEMORY_SUMMARIZER`` (default:
:func:`extractive`, offline and deterministic), so the memory store never
imports the runtime that provides a model-backed one.

:func:`summarize` runs it with a time limit and turns every way it can fail
(raises, times out, returns nothing) into a ``SummarizerError``.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .exceptions import (
    SummarizerEmpty,
    SummarizerError,
    SummarizerMisconfigured,
    SummarizerTimeout,
)

Summarizer = Callable[[Sequence[Mapping[str, Any]]], str]

DEFAULT_SUMMARIZER = "memory.summarizers.extractive"
DEFAULT_TIMEOUT = 120.0
logger = logging.getLogger(__name__)

# Sentence ends, the ideographic ones included.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*|\n+")
SENTENCE_CHARS = 200
SUMMARY_CHARS = 1200


def first_sentence(text: str, limit: int = SENTENCE_CHARS) -> str:
    sentence = _SENTENCE_END.split(text.strip(), maxsplit=1)[0].strip()
    sentence = " ".join(sentence.split())
    return sentence if len(sentence) <= limit else sentence[: limit - 1].rstrip() + "…"


def extractive(messages: Sequence[Mapping[str, Any]]) -> str:
    """The first sentence of each user and assistant message, ``role: sentence`` a line.

    When that is longer than ``SUMMARY_CHARS``, the first and last lines are kept
    with a count of those left out between them.
    """
    lines = [
        f"{m['role']}: {first_sentence(m['text'])}"
        for m in messages
        if m.get("role") in ("user", "assistant") and str(m.get("text", "")).strip()
    ]
    if not lines:  # only tool output, say: name what there was
        roles = sorted({str(m.get("role")) for m in messages})
        return f"({len(messages)} messages: {', '.join(roles)})" if messages else ""
    if sum(len(line) + 1 for line in lines) <= SUMMARY_CHARS:
        return "\n".join(lines)
    half = (SUMMARY_CHARS - 40) // 2
    head = _within(lines, half)
    tail = _within(list(reversed(lines[len(head) :])), half)
    left_out = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"[… {left_out} more messages …]", *reversed(tail)])


def _within(lines: list[str], budget: int) -> list[str]:
    """The leading lines that fit in ``budget`` characters (at least one, cut to fit)."""
    kept: list[str] = []
    for line in lines:
        if len(line) + 1 > budget:
            if not kept:
                kept.append(line[: max(budget - 2, 1)] + "…")
            break
        budget -= len(line) + 1
        kept.append(line)
    return kept


def get_summarizer() -> Summarizer:
    """The callable named by ``FORGE_MEMORY_SUMMARIZER``."""
    path = getattr(settings, "FORGE_MEMORY_SUMMARIZER", "") or DEFAULT_SUMMARIZER
    try:
        summarizer = import_string(path)
    except ImportError as exc:
        raise SummarizerMisconfigured(
            f"FORGE_MEMORY_SUMMARIZER={path!r} cannot be imported: {exc}"
        ) from None
    if not callable(summarizer):
        raise SummarizerMisconfigured(f"FORGE_MEMORY_SUMMARIZER={path!r} is not callable")
    return summarizer


def summarize(
    messages: Sequence[Mapping[str, Any]],
    *,
    summarizer: Summarizer | None = None,
    timeout: float | None = None,
) -> str:
    """The summary of ``messages``, or a ``SummarizerError`` (nothing else escapes).

    With a positive ``timeout`` (default ``FORGE_MEMORY_SUMMARIZER_TIMEOUT``) the
    summarizer runs on a daemon worker thread and is abandoned when it overruns (a
    thread cannot be stopped; its result is ignored).
    """
    if summarizer is None:
        summarizer = get_summarizer()
    if timeout is None:
        timeout = float(getattr(settings, "FORGE_MEMORY_SUMMARIZER_TIMEOUT", DEFAULT_TIMEOUT))
    if timeout > 0:
        result = _call_with_timeout(summarizer, messages, timeout)
    else:
        result = _call(summarizer, messages)
    if isinstance(result, BaseException):
        if isinstance(result, SummarizerError):
            raise result
        raise SummarizerError(
            f"the summarizer failed: {type(result).__name__}: {result}"
        ) from result
    if not isinstance(result, str) or not result.strip():
        raise SummarizerEmpty(f"the summarizer returned nothing ({type(result).__name__})")
    return result


def _call(summarizer: Summarizer, messages: Sequence[Mapping[str, Any]]) -> Any:
    try:
        return summarizer(messages)
    except Exception as exc:
        return exc


class _Worker:
    """A daemon thread that runs summarizer calls handed to it, one at a time.

    Workers are reused (starting a thread per summary costs more than an extractive
    summary); one whose call overran is abandoned to finish on its own.
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Summarizer, Any, threading.Event, list[Any]]] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._run, name="memory-summarizer", daemon=True).start()

    def _run(self) -> None:
        while True:
            summarizer, messages, done, box = self.jobs.get()
            try:
                box.append(_call(summarizer, messages))
            finally:
                _close_thread_connections()
                done.set()

    def call(self, summarizer: Summarizer, messages: Any, timeout: float) -> tuple[bool, Any]:
        done = threading.Event()
        box: list[Any] = []
        self.jobs.put((summarizer, messages, done, box))
        if not done.wait(timeout):
            return False, None
        return True, box[0]


_idle: list[_Worker] = []
_idle_lock = threading.Lock()


def _call_with_timeout(
    summarizer: Summarizer, messages: Sequence[Mapping[str, Any]], timeout: float
) -> Any:
    with _idle_lock:
        worker = _idle.pop() if _idle else _Worker()
    finished, result = worker.call(summarizer, messages, timeout)
    if not finished:
        raise SummarizerTimeout(f"the summarizer did not answer within {timeout:g} s")
    with _idle_lock:
        _idle.append(worker)
    return result


def _close_thread_connections() -> None:
    """A summarizer that used the database on its thread leaves connections behind."""
    from django.db import connections

    connections.close_all()
