"""Signals the memory store sends, for what watches it from outside (the application's
metrics): the store imports nothing of the application.

``rollings_done(sender=None, outcomes, seconds)``: after a sweep
(``memory.rolling.sweep``, what ``roll_dialogs`` runs) or one core's rolling
(``services.roll_core``), with every core's :class:`~memory.rolling.RollOutcome`
and the wall time the sweep or rolling took. Sent outside any transaction; a
receiver that raises is logged, never a failed sweep.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger(__name__)

rollings_done = Signal()


def send_rollings_done(outcomes: list[Any], seconds: float) -> None:
    for receiver, result in rollings_done.send_robust(
        sender=None, outcomes=outcomes, seconds=seconds
    ):
        if isinstance(result, Exception):
            logger.warning("a rollings_done receiver %r failed: %r", receiver, result)
