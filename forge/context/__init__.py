"""What the model sees, derived from the log every turn (``derive_messages``).

Two inputs, both read from the store: the history (messages with their parts)
and the context blocks logged by ``context.updated`` events. Nothing reaches
the model that is not in the log, so the same functions run on an exported log
replay what the model was sent.

:func:`request_for` is the one way a request is made: the run loop before each
step, the ``context/`` route, and replay all call it. At the log's end it comes
from :mod:`forge.context.incremental` (a per-session cache that folds only the
events since the last step onto each session's :mod:`forge.context.derived` state),
byte-for-byte what the full derivation gives.
The derivation itself lives in :mod:`forge.context.messages` (history to model
messages) and :mod:`forge.context.visible` (the history read from the newest
boundary on). The history the model sees is ``filter_compacted`` (the newest
compaction boundary, :mod:`forge.context.compacted`), then the rolled cut
(:mod:`forge.context.rolled`: the messages long-term memory rolled, which the
``dialog_history`` block's summaries replace), then ``drop_superseded``.

Context blocks: each ``context.updated`` event carries ``{"blocks": [...]}``;
a block is ``{"kind", "key", ...}`` and replaces the earlier block of the same
kind and key (``"removed": true`` drops it; ``sessions.projector.fold_context``
is that fold). Kinds used by the runtime:

* ``system`` (``text``): a system prompt (the agent's, key ``agent``);
* ``tools`` (``tools``: a list of ``{name, description, parameters}``);
* ``settings`` (``model``, ``temperature``): how the model is called.

Other kinds reach the model as extra system text, after the agent's prompt:
memory's ``dialog_history`` (key ``memory``) is one, and its ``rolled_through``
also hides the session's messages up to that id (:mod:`forge.context.rolled`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from forge.providers.base import ModelRequest
from sessions import selectors
from sessions.exceptions import InvalidCursor
from sessions.models import Session, SessionEvent
from sessions.projector import fold_context

from .compacted import filter_compacted
from .incremental import cache
from .messages import COMPACTION_PROMPT, build_request, derive_messages, model_of
from .rolled import drop_rolled, rolled_kept, rolled_through

__all__ = [
    "COMPACTION_PROMPT",
    "build_request",
    "derive_messages",
    "prune_choice",
    "request_for",
    "steps_start",
    "store_snapshot",
    "visible_history",
]


def store_snapshot(session: Session, appended: Sequence[SessionEvent] = ()) -> bool:
    """Store the session's context snapshot in the caller's transaction when one is due
    (:meth:`forge.context.incremental.ContextCache.store_snapshot`; ``appended``: the
    events the caller just appended, whose last is the log's head). The turn's last
    write calls it, so a process that never served the session folds only what follows."""
    head = appended[-1].seq if appended else None
    return cache.store_snapshot(session, head)


def visible_history(session: Session) -> list[dict[str, Any]]:
    """The history the model sees at the log's end (:func:`filter_compacted` then the
    rolled cut, read from the newest boundary or cut on: :mod:`forge.context.visible`),
    from the incremental cache."""
    return cache.history(session)


def prune_choice(session: Session) -> list[Mapping[str, Any]]:
    """The completed tool outputs pruning marks now (``forge.context.pruning``), chosen
    from the visible history at the log's end, from the incremental cache."""
    return cache.prune_choice(session)


def steps_start(session: Session) -> tuple[list[Mapping[str, Any]], tuple[str, ModelRequest]]:
    """:func:`prune_choice` and :func:`request_for` at the log's end from one catch-up of
    the cached state (the run loop asks both before a turn's steps). The request is the
    one before marking: after marking what pruning chose, read :func:`request_for`."""
    return cache.steps_start(session)


def request_for(session: Session, *, at: int | None = None) -> tuple[str, ModelRequest]:
    """``(provider/model, request)``: exactly what the model is sent for the session's
    next step, derived from the log alone: at its end, or as of event ``at``.

    The model is the one the logged ``settings`` block names (``FORGE_MODEL``
    before any turn logged one).
    """
    if at is None:
        return cache.request(session)
    tenant = session.tenant
    head = selectors.head_seq(tenant=tenant, session_id=session.pk)
    if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= head:
        raise InvalidCursor(f"at must be a seq from 0 to {head} (the log's head), not {at!r}")
    blocks = fold_context(selectors.context_updates(tenant=tenant, session=session, upto_seq=at))
    history = drop_rolled(
        filter_compacted(selectors.history_at(tenant=tenant, session=session, seq=at)),
        rolled_through(blocks),
        rolled_kept(blocks),
    )
    model = model_of(blocks)
    _, _, name = model.partition("/")
    return model, build_request(blocks=blocks, history=history, model=name)
