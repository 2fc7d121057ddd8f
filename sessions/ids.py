"""The session store's ids: ``ses_``, ``msg_``, ``prt_``, ``evt_`` (see ``accounts.ids``)."""

from __future__ import annotations

from accounts.ids import ID_RE, is_valid_id, new_id

__all__ = [
    "ID_RE",
    "is_valid_id",
    "new_event_id",
    "new_id",
    "new_message_id",
    "new_part_id",
    "new_session_id",
]


def new_session_id() -> str:
    return new_id("ses")


def new_message_id() -> str:
    return new_id("msg")


def new_part_id() -> str:
    return new_id("prt")


def new_event_id() -> str:
    return new_id("evt")
