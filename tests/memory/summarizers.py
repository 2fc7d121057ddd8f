"""Summarizers for tests, chosen through ``FORGE_MEMORY_SUMMARIZER`` (also by subprocesses).

``sleepy`` sleeps ``FORGE_TEST_SUMMARIZER_SLEEP`` seconds (default 0.5) before
summarizing, and, when ``FORGE_TEST_SUMMARIZER_LOG`` names a file, appends a line
per call to it, so a test can count the calls of several processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from memory.summarizers import extractive


def sleepy(messages: Sequence[Mapping[str, Any]]) -> str:
    time.sleep(float(os.environ.get("FORGE_TEST_SUMMARIZER_SLEEP", "0.5")))
    summary = extractive(messages)
    log = os.environ.get("FORGE_TEST_SUMMARIZER_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()} {messages[0]['text'][:40]!r}\n")
    return summary


def failing(messages: Sequence[Mapping[str, Any]]) -> str:
    raise RuntimeError("the model is down")


def empty(messages: Sequence[Mapping[str, Any]]) -> str:
    return "   "


def not_a_string(messages: Sequence[Mapping[str, Any]]) -> Any:
    return None


def slow(messages: Sequence[Mapping[str, Any]]) -> str:
    time.sleep(5)
    return "too late"


def picky(messages: Sequence[Mapping[str, Any]]) -> str:
    """Fails on a dialogue that mentions ``poison``; summarizes the others."""
    if any("poison" in str(m.get("text", "")) for m in messages):
        raise ValueError("cannot summarize poison")
    return extractive(messages)
