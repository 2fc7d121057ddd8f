"""AfterRolling: consumers run after each rolling that wrote a slice (CONTRACT §6).

    from memory import after_rolling

    @after_rolling.register
    def remember(result: after_rolling.RollingResult) -> None: ...

A consumer gets the :class:`RollingResult` once the rolling's transaction has
committed, in the process that rolled. Consumers run in registration order,
each isolated: one that raises is logged and blocks neither the others nor
the rolling (which is committed by then). Registering a consumer twice keeps
one registration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from .results import RollingResult, Trigger

logger = logging.getLogger(__name__)

__all__ = ["RollingResult", "Trigger", "consumers", "register", "trigger", "unregister"]

Consumer = Callable[[RollingResult], Any]

_lock = threading.Lock()
_consumers: list[Consumer] = []


def register(consumer: Consumer) -> Consumer:
    """Run ``consumer(result)`` after every rolling; returns it (usable as a decorator)."""
    if not callable(consumer):
        raise TypeError("an AfterRolling consumer must be callable")
    with _lock:
        if consumer not in _consumers:
            _consumers.append(consumer)
    return consumer


def unregister(consumer: Consumer) -> None:
    with _lock:
        if consumer in _consumers:
            _consumers.remove(consumer)


def consumers() -> list[Consumer]:
    with _lock:
        return list(_consumers)


def trigger(result: RollingResult) -> list[tuple[Consumer, BaseException]]:
    """Run every consumer on ``result``; returns the ones that failed, with their error."""
    failures: list[tuple[Consumer, BaseException]] = []
    for consumer in consumers():
        try:
            consumer(result)
        except Exception as exc:
            failures.append((consumer, exc))
            logger.exception(
                "AfterRolling consumer %s failed for core %s (slice %s)",
                getattr(consumer, "__qualname__", repr(consumer)),
                result.core_id,
                result.slice_id,
            )
    return failures
