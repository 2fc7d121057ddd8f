"""Errors raised by the session store. Each carries a stable ``code``."""

from __future__ import annotations


class ForgeError(Exception):
    code = "error"


class InvalidMessage(ForgeError, ValueError):
    code = "invalid_message"


class InvalidPart(ForgeError, ValueError):
    code = "invalid_part"


class InvalidEvent(ForgeError, ValueError):
    code = "invalid_event"


class InvalidCursor(ForgeError, ValueError):
    code = "invalid_cursor"


class SessionMismatch(ForgeError, ValueError):
    """An object that belongs to another session (or tenant) was named."""

    code = "session_mismatch"


class NotFound(ForgeError, LookupError):
    code = "not_found"


class AppendOnlyError(ForgeError):
    """An attempt to change or delete an event of the append-only log."""

    code = "append_only"


class LogIntegrityError(ForgeError):
    """A log whose sequence or hash chain does not verify."""

    code = "log_integrity"
