"""MessageSummarizer: a plain callable ``summarize(messages) -> str``.

``messages`` is the compressed increment, ``[{role, text, at}]`` oldest first
(see ``compressor``); the result is the slice's summary. The summarizer in
use is the dotted path in the setting ``FORGE_MEMORY_SUMMARIZER``, so the memory
store never imports the runtime that provides a model-backed one (the project's
setting names ``forge.runtime.small_model.summarize_dialogue``). Without the
setting it is :func:`extractive` (``memory.extractive``: the sentences that carry
facts, offline and deterministic), which the model-backed one also uses for
offline models.

:func:`summarize` runs it with a time limit and turns every way it can fail
(raises, times out, returns nothing) into a ``SummarizerError``.

While a rolling summarizes, :func:`summary_for` names whose memory the summary is
for (the core's tenant, user and agent), on whatever thread the summarizer runs:
a model-backed summarizer bills its call to them (usage and budgets), though the
call-signature stays ``summarize(messages)``.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .exceptions import (
    SummarizerEmpty,
    SummarizerError,
    SummarizerMisconfigured,
    SummarizerTimeout,
)
from .extractive import extractive as extractive  # the default's dotted path names it here

Summarizer = Callable[[Sequence[Mapping[str, Any]]], str]

DEFAULT_SUMMARIZER = "memory.summarizers.extractive"
DEFAULT_TIMEOUT = 120.0
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryFor:
    """Whose memory a summary is written for: whom a model's summary is billed to."""

    tenant_id: int
    user_id: int
    agent: str


_FOR: contextvars.ContextVar[SummaryFor | None] = contextvars.ContextVar(
    "memory_summary_for", default=None
)


def summary_for() -> SummaryFor | None:
    """Whose memory the summary being written is for (None outside a rolling)."""
    return _FOR.get()


@contextmanager
def summarizing_for(who: SummaryFor) -> Iterator[None]:
    """:func:`summary_for` is ``who`` within (the summarizer's worker thread included)."""
    token = _FOR.set(who)
    try:
        yield
    finally:
        _FOR.reset(token)


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
        self.jobs: queue.SimpleQueue[
            tuple[contextvars.Context, Summarizer, Any, threading.Event, list[Any]]
        ] = queue.SimpleQueue()
        threading.Thread(target=self._run, name="memory-summarizer", daemon=True).start()

    def _run(self) -> None:
        while True:
            context, summarizer, messages, done, box = self.jobs.get()
            try:
                box.append(context.run(_call, summarizer, messages))
            finally:
                _close_thread_connections()
                done.set()

    def call(self, summarizer: Summarizer, messages: Any, timeout: float) -> tuple[bool, Any]:
        done = threading.Event()
        box: list[Any] = []
        self.jobs.put((contextvars.copy_context(), summarizer, messages, done, box))
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
