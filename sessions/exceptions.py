"""Errors raised by the session store. Each carries a stable ``code`` and its HTTP
``status`` (see ``accounts.exceptions.ForgeError``)."""

from __future__ import annotations

from accounts.exceptions import ForgeError

__all__ = [
    "AppendOnlyError",
    "ForgeError",
    "InvalidCursor",
    "InvalidEvent",
    "InvalidMessage",
    "InvalidPart",
    "LogIntegrityError",
    "NotFound",
    "ReplyOpen",
    "SessionMismatch",
]


class InvalidMessage(ForgeError, ValueError):
    code = "invalid_message"


class InvalidPart(ForgeError, ValueError):
    code = "invalid_part"


class InvalidEvent(ForgeError, ValueError):
    code = "invalid_event"


class InvalidCursor(ForgeError, ValueError):
    """A paging or resume parameter (``after``, ``before``, ``limit``, ``at``) that is no
    valid position."""

    code = "invalid_cursor"


class SessionMismatch(ForgeError, ValueError):
    """An object that belongs to another session (or tenant) was named."""

    code = "session_mismatch"
    status = 404  # another tenant's object is never told apart from a missing one


class NotFound(ForgeError, LookupError):
    code = "not_found"
    status = 404


class ReplyOpen(ForgeError):
    """A removal of a reply that is still open (running, or waiting for an approval),
    of one of its parts, or of its prompt: the turn would write after it."""

    code = "reply_open"
    status = 409


class AppendOnlyError(ForgeError):
    """An attempt to change or delete an event of the append-only log."""

    code = "append_only"
    status = 409


class LogIntegrityError(ForgeError):
    """A log whose sequence or hash chain does not verify."""

    code = "log_integrity"
