"""The application's errors: what the runtime and the faces refuse, with the code and
HTTP status each means (the stores' errors are in ``accounts.exceptions`` and
``sessions.exceptions``; all are ``ForgeError``s, translated in one place per
face)."""

from __future__ import annotations

from accounts.exceptions import ForgeError

__all__ = [
    "AbortUnavailable",
    "ApprovalAnswered",
    "ApprovalExpired",
    "ApprovalNotFound",
    "BodyTooLarge",
    "CompactionFailed",
    "Conflict",
    "EditUnsupported",
    "ForgeError",
    "InvalidAnswer",
    "InvalidPrompt",
    "NotAuthenticated",
    "NotImplementedYet",
    "NotLastReply",
    "NotRunning",
    "NothingToCompact",
    "NothingToRegenerate",
    "PromptTooLarge",
    "SessionBusy",
    "StillRunning",
    "StreamUnavailable",
    "UnknownAgent",
    "UnknownModel",
]


class InvalidPrompt(ForgeError, ValueError):
    code = "invalid_prompt"


class PromptTooLarge(InvalidPrompt):
    """A prompt over ``FORGE_MAX_PROMPT_BYTES`` (413 on HTTP, ``too_large`` on the socket)."""

    code = "too_large"
    status = 413


class BodyTooLarge(ForgeError):
    """A request body over its route's limit (``FORGE_MAX_IMPORT_BYTES`` for an import),
    refused before it is read past the limit."""

    code = "too_large"
    status = 413


class MalformedRequest(ForgeError):
    """A request daphne cannot parse: a request line, a header or a body's framing
    (``Content-Length``, chunks) that is not HTTP. Answered by the server before any
    view, with the connection closed."""

    code = "bad_request"
    status = 400


class UriTooLong(MalformedRequest):
    """A request line over the server's line limit (16 KiB)."""

    code = "uri_too_long"
    status = 414


class HeadersTooLarge(MalformedRequest):
    """A header line, or the request's head in all, over the server's limit (16 KiB)."""

    code = "headers_too_large"
    status = 431


class UnknownAgent(ForgeError, ValueError):
    code = "unknown_agent"


class UnknownModel(ForgeError, ValueError):
    code = "unknown_model"


class Conflict(ForgeError):
    """The request is well formed but the session's state refuses it now (409): the
    same request may succeed later, so each subclass says which state it met."""

    status = 409


class SessionBusy(Conflict):
    """The session runs a turn already (one turn at a time per session). ``retry_after``
    (seconds) when the lease's holder is taken for dead: when its lease expires and the
    session can be taken over (a live holder's turn ends when it ends: no hint)."""

    code = "busy"

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extra(self) -> dict[str, object]:
        return {} if self.retry_after is None else {"retry_after": self.retry_after}


class NotRunning(Conflict):
    """Abort asked for, but no turn runs."""

    code = "not_running"


class StillRunning(Conflict):
    """Abort asked for, and the process holding the session's lease has not stopped its
    turn in time, yet cannot be judged dead (its heartbeat is on time): the turn may
    still be running, so it is left alone. Not ``not_running``: the session is busy, as
    its status says. ``retry_after``: seconds until the holder, if it is dead, is judged
    so (an abort then finalizes the turn)."""

    code = "still_running"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extra(self) -> dict[str, object]:
        return {"retry_after": self.retry_after}


class NotAuthenticated(ForgeError):
    code = "not_authenticated"
    status = 401


class InvalidToken(NotAuthenticated):
    """An ``Authorization: Token <key>`` header whose key does not authenticate (unknown,
    or its user inactive): DRF's ``authentication_failed``, on the faces that are not
    DRF views too."""

    code = "authentication_failed"


class NotImplementedYet(ForgeError):
    code = "not_implemented"
    status = 501


class NothingToCompact(ForgeError, ValueError):
    """Compaction asked for on an empty session, or with nothing new since the last one."""

    code = "nothing_to_compact"


class CompactionFailed(ForgeError):
    """The summary model failed or returned nothing: nothing was written."""

    code = "compaction_failed"
    status = 502


class NothingToRegenerate(Conflict):
    """Regenerate asked for, but the chat has no reply to a prompt as its last reply."""

    code = "nothing_to_regenerate"


class EditUnsupported(ForgeError):
    """A message sent already was asked to be replaced (the AI SDK's
    ``sendMessage({text, messageId})`` of an earlier prompt): the log is append-only,
    and later turns answered the old text."""

    code = "edit_unsupported"
    status = 400


class NotLastReply(Conflict):
    """Regenerate asked for a message that is not the chat's last reply (or its prompt)."""

    code = "not_last_reply"


class StreamUnavailable(ForgeError):
    """A stream (socket, SSE, AI SDK) could not join its session's channel-layer group
    within ``FORGE_LAYER_TIMEOUT``: the layer (Redis) is away. Nothing was written and
    no stream slot is held; the client should try again after ``retry_after`` seconds
    (503 with ``Retry-After`` on HTTP; an error frame and close code 4503 on the
    socket)."""

    code = "stream_unavailable"
    status = 503
    retry_after = 5


class AbortUnavailable(ForgeError):
    """Abort asked for, the turn runs in another process, and the abort could not be sent
    to it: the channel layer (Redis) is away. The turn is left running (its process may
    be alive; one judged dead is finalized instead, without the layer). The client
    should ask again after ``retry_after`` seconds (503 with ``Retry-After``; an error
    frame on the socket)."""

    code = "abort_unavailable"
    status = 503

    def __init__(self, message: str, *, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def extra(self) -> dict[str, object]:
        return {"retry_after": self.retry_after}


class ApprovalNotFound(ForgeError):
    """No tool call of the session waits for this answer (an unknown call id, a call that
    never asked, a session of another tenant, or a caller who is not its owner)."""

    code = "approval_not_found"
    status = 404


class ApprovalAnswered(Conflict):
    """The call was answered already: exactly one answer is logged."""

    code = "approval_answered"


class ApprovalExpired(Conflict):
    """The call waited past ``FORGE_APPROVAL_TIMEOUT`` and was denied as expired."""

    code = "approval_expired"


class InvalidAnswer(ForgeError, ValueError):
    """An approval answer that is not ``{approve: bool, reason?: str}`` (400)."""

    code = "invalid_answer"
