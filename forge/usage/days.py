"""Days as the usage API and ``rebuild_usage`` take them: ``YYYY-MM-DD`` and nothing
else. ``date.fromisoformat`` also takes ``20261201`` and ``2026-W49-1``, which the API
refused and the command took (QA): both read a day here."""

from __future__ import annotations

import datetime as dt
import re

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_day(raw: str) -> dt.date:
    """``raw`` as a day; ``ValueError`` unless it is a real ``YYYY-MM-DD``."""
    if not _DAY.fullmatch(raw):
        raise ValueError(raw)
    return dt.date.fromisoformat(raw)
