"""The options of a rolling and when a core is due.

:class:`RollingOptions` are the arguments given, the others from settings, validated:
``threshold`` at least 1, ``keep`` at most ``threshold - 1``, ``idle_after`` positive and
at most :data:`MAX_IDLE_AFTER` (a finite span ``now - idle_after`` can hold).
:func:`due` says which trigger a core's window meets (``idle`` before ``threshold``; an
empty window never); :func:`candidate_core_ids` finds the cores a sweep visits, from the
partial indexes alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from ..exceptions import InvalidRollingOption
from ..models import MemoryCore
from ..results import Trigger

DEFAULT_THRESHOLD = 40
DEFAULT_KEEP = 8
DEFAULT_IDLE_AFTER = 1800.0
MAX_IDLE_AFTER = timedelta(days=3650)  # "never idle" in practice; inf overflowed a datetime


@dataclass(frozen=True)
class RollingOptions:
    threshold: int
    keep: int  # messages left unrolled in the window; at most threshold - 1
    idle_after: timedelta

    @classmethod
    def build(
        cls,
        *,
        threshold: int | None = None,
        keep: int | None = None,
        idle_after: timedelta | float | None = None,
    ) -> RollingOptions:
        """Options from the arguments given, the others from settings; validated."""
        if threshold is None:
            threshold = getattr(settings, "FORGE_MEMORY_ROLL_THRESHOLD", DEFAULT_THRESHOLD)
        if keep is None:
            keep = getattr(settings, "FORGE_MEMORY_ROLL_KEEP", DEFAULT_KEEP)
        if idle_after is None:
            idle_after = getattr(settings, "FORGE_MEMORY_IDLE_AFTER", DEFAULT_IDLE_AFTER)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise InvalidRollingOption(f"threshold must be a positive integer, got {threshold!r}")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidRollingOption(f"keep must be a non-negative integer, got {keep!r}")
        if not isinstance(idle_after, timedelta):
            if isinstance(idle_after, bool) or not isinstance(idle_after, int | float):
                raise InvalidRollingOption("idle_after must be a number of seconds")
            if not math.isfinite(idle_after) or idle_after > MAX_IDLE_AFTER.total_seconds():
                raise InvalidRollingOption(
                    f"idle_after must be a finite number of seconds, at most "
                    f"{int(MAX_IDLE_AFTER.total_seconds())} ({MAX_IDLE_AFTER.days} days)"
                )
            idle_after = timedelta(seconds=idle_after)
        if idle_after <= timedelta(0):
            raise InvalidRollingOption("idle_after must be positive")
        if idle_after > MAX_IDLE_AFTER:
            raise InvalidRollingOption(f"idle_after must be at most {MAX_IDLE_AFTER.days} days")
        return cls(threshold=threshold, keep=min(keep, threshold - 1), idle_after=idle_after)


def due(
    *,
    window_count: int,
    last_interaction_at: datetime | None,
    options: RollingOptions,
    now: datetime,
    force: bool = False,
) -> Trigger | None:
    if window_count <= 0:
        return None
    if last_interaction_at is not None and last_interaction_at <= now - options.idle_after:
        return "idle"
    if window_count >= options.threshold:
        return "threshold"
    return "manual" if force else None


def candidate_core_ids(*, options: RollingOptions, now: datetime) -> list[str]:
    """Cores over the threshold or idle with a non-empty window, by id.

    Two queries on the partial indexes ``memorycore_window`` and ``memorycore_idle``
    (only cores with a non-empty window are in them): no scan of cores or messages.
    """
    busy = MemoryCore.objects.filter(window_count__gt=0)
    over = busy.filter(window_count__gte=options.threshold).values_list("pk", flat=True)
    idle = busy.filter(last_interaction_at__lte=now - options.idle_after).values_list(
        "pk", flat=True
    )
    return sorted({*over, *idle})
