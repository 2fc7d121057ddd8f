"""All writes to the session store (CONTRACT §6).

Every function is keyword-only and atomic. A write appends exactly one event
(``append_batch``: one event per write, in one transaction) to the session's
log, projects it into messages and parts in the same transaction, and
publishes it to the session's channel-layer group after the transaction
commits. Bad input raises a ``ForgeError`` subclass before anything
is written: no event, no row, no publish.

* ``append``: the engine (sequence allocation, hash chain, projection, publish);
* ``session``: create, rename, delete a session;
* ``writes``: one value per write a conversation takes (``UpdatePart`` …), which
  the single entries and ``append_batch`` validate and append the same way;
* ``messages``: messages and parts, the free events, and the bus-only frames;
* ``batch``: ``append_batch``, several writes as one transaction (one event each);
* ``transfer``: rebuild a projection, fork (and the copies' id renaming and batches);
* ``imports``: parse, verify and import an exported log (keeping its ids or as a copy).
"""

from ..log import LOG_FORMAT, LOG_VERSION, log_header
from .append import OPTIMISTIC_ATTEMPTS
from .batch import append_batch
from .imports import import_log, parse_log
from .messages import (
    FREE_EVENT_TYPES,
    append_event,
    apublish_delta,
    apublish_status,
    publish_delta,
    publish_status_on_commit,
    remove_message,
    remove_part,
    update_message,
    update_part,
)
from .session import create_session, delete_session, session_info, update_session
from .transfer import fork_session, rebuild_projection
from .writes import AppendEvent, RemoveMessage, RemovePart, UpdateMessage, UpdatePart, Write

__all__ = [
    "FREE_EVENT_TYPES",
    "LOG_FORMAT",
    "LOG_VERSION",
    "OPTIMISTIC_ATTEMPTS",
    "AppendEvent",
    "RemoveMessage",
    "RemovePart",
    "UpdateMessage",
    "UpdatePart",
    "Write",
    "append_batch",
    "append_event",
    "apublish_delta",
    "apublish_status",
    "create_session",
    "delete_session",
    "fork_session",
    "import_log",
    "log_header",
    "parse_log",
    "publish_delta",
    "publish_status_on_commit",
    "rebuild_projection",
    "remove_message",
    "remove_part",
    "session_info",
    "update_message",
    "update_part",
    "update_session",
]
