"""Incremental context: the next step's model input folded from the events since the
last one, not re-derived from the whole history.

:class:`Derived` is what :func:`forge.context.request_for` needs for a session
as of its event ``seq`` (the read range of the history, the model's order of it,
each message's rendering, the context blocks), in a form that folds further
events. :class:`ContextCache` keeps one per session (a per-process LRU) and, on
a request, reads only the events from the cached ``seq`` on
(``selectors.log_from``) and folds them.

Invariants:

* What the cache returns is byte-for-byte what the full derivation
  (:func:`full_request`) returns from the log at the same seq. With
  ``FORGE_CONTEXT_VERIFY`` on (the test settings) every result is compared with
  it, and a difference raises :class:`ContextCacheMismatch`.
* A cached state is used only while its ``(seq, hash)`` is still in the log: the
  hash chain makes that pair name the whole log up to ``seq``, so a log that was
  deleted, imported again, rolled back or rewritten is never folded onto.
* The rolled cut (:mod:`forge.context.rolled`) is folded when a
  ``context.updated`` moves it forward (the messages it now hides leave the
  view); one that moves it back or removes it (the next speaker's memory rolled
  less of the session, or they have none) needs messages the state may not
  have read, so it falls back.
* Whatever the fold does not apply exactly — a new or changed boundary
  (``session.compacted``, a summary message, a ``compaction`` part), a removal,
  a reply that supersedes another (``forge.context.superseded``), a message or
  part out of id order, a rolled cut moved back, an unknown event — falls back
  to the full derivation, which seeds the cache again. Falling back is always
  correct, only slower.
* A state is owned by one request at a time: it leaves the cache while it folds
  (a concurrent request for the same session derives in full).
* Folding an event twice is harmless (a seed reads the head before the history,
  so the events between are folded again onto a state that already has them).
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from forge.providers.base import ModelRequest
from sessions import selectors
from sessions.models import Session
from sessions.projector import apply_context, fold_context

from .compacted import filter_compacted
from .messages import build_request, item_messages, model_of, request_with
from .rolled import drop_rolled, is_generated, rolled_through
from .superseded import drop_superseded, is_reply
from .visible import read_history, visible_history

T = TypeVar("T")

# A missing state is folded from the log's start when the log has fewer events than this.
FOLD_FROM_START_EVENTS = 200


class Fallback(Exception):
    """An event the fold does not apply incrementally; the message says which."""


class ContextCacheMismatch(AssertionError):
    """``FORGE_CONTEXT_VERIFY``: the cached model input differs from the full derivation."""


def _ordered(low: str | None, high: str) -> bool:
    """``low < high`` in the database's order too (both generated ids), or no ``low``."""
    if not is_generated(high):
        return False
    return low is None or (is_generated(low) and low < high)


def full_request(session: Session) -> tuple[str, ModelRequest]:
    """The model input derived from the whole visible history and every context update:
    what :func:`forge.context.request_for` returned before the cache, and what the
    cache must equal."""
    blocks = fold_context(selectors.context_updates(tenant=session.tenant, session=session))
    model = model_of(blocks)
    _, _, name = model.partition("/")
    history = visible_history(session, blocks)
    return model, build_request(blocks=blocks, history=history, model=name)


def request_bytes(result: tuple[str, ModelRequest]) -> str:
    """The comparison key: the model and the request as JSON, keys in their order."""
    model, request = result
    return json.dumps([model, request.as_dict()], ensure_ascii=False)


@dataclass
class Derived:
    """The derived context of one session as of event ``seq`` (whose hash is ``hash``)."""

    tenant_id: int
    session_id: str
    seq: int
    hash: str
    start: str | None  # the id the history was read from (None: all of it)
    through: str | None  # the rolled cut in force: ids up to it are hidden
    items: dict[str, dict[str, Any]]  # the read history {info, parts}, by message id
    last_id: str | None  # the newest message id read
    order: list[str]  # the visible history's ids, in filter_compacted's order, cut
    kept: list[str]  # ``order`` without superseded replies: what the model is sent
    replies: dict[str, str]  # parent id -> its visible reply
    rendered: dict[str, list[dict[str, Any]]]  # kept message id -> its model messages
    blocks: dict[str, dict[str, Any]]
    messages: list[dict[str, Any]] = field(default_factory=list)  # the kept renderings, joined
    tail_start: int = 0  # where the last kept message's rendering starts in ``messages``
    dirty: bool = True  # ``messages`` must be joined again

    @classmethod
    def seed(cls, session: Session) -> Derived:
        """The full derivation, kept in foldable form. The head is read first: whatever
        is appended meanwhile is folded again on the next request, harmlessly."""
        tenant = session.tenant
        seq, head_hash = selectors.log_head(tenant=tenant, session=session)
        blocks = fold_context(selectors.context_updates(tenant=tenant, session=session))
        through = rolled_through(blocks)
        history, start = read_history(session, through)
        visible = drop_rolled(filter_compacted(history), through)
        kept = drop_superseded(visible)
        return cls(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            seq=seq,
            hash=head_hash,
            start=start,
            through=through,
            items={str(item["info"]["id"]): item for item in history},
            last_id=str(history[-1]["info"]["id"]) if history else None,
            order=[str(item["info"]["id"]) for item in visible],
            kept=[str(item["info"]["id"]) for item in kept],
            replies={
                str(item["info"]["parent_id"]): str(item["info"]["id"])
                for item in kept
                if is_reply(item["info"])
            },
            rendered={str(item["info"]["id"]): item_messages(item) for item in kept},
            blocks=blocks,
        )

    @classmethod
    def empty(cls, session: Session) -> Derived:
        """The derived context of an empty log (seq 0): folding a short log from here is
        cheaper than the full derivation's reads (see ``ContextCache._current``)."""
        return cls(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            seq=0,
            hash="",
            start=None,
            through=None,
            items={},
            last_id=None,
            order=[],
            kept=[],
            replies={},
            rendered={},
            blocks={},
        )

    def __len__(self) -> int:
        return len(self.items)

    def fold(self, seq: int, event_hash: str, type: str, data: Any) -> None:
        """Apply event ``seq`` (raises :class:`Fallback` when it cannot)."""
        if type == "message.updated":
            self._message(data)
        elif type == "part.updated":
            self._part(data)
        elif type == "context.updated":
            apply_context(self.blocks, data)
            self._cut(rolled_through(self.blocks))
        elif type not in ("session.created", "session.updated"):  # those change no input
            raise Fallback(type)  # session.compacted, removals, anything new
        self.seq, self.hash = seq, event_hash

    def _message(self, info: dict[str, Any]) -> None:
        message_id = str(info["id"])
        if info.get("summary"):
            raise Fallback("summary")  # a boundary begins, changes or closes
        item = self.items.get(message_id)
        if item is not None:
            old = item["info"]
            for key in ("role", "parent_id", "summary"):
                if old.get(key) != info.get(key):
                    raise Fallback(f"message {key}")
            item["info"] = info
            self._render(message_id)
        elif self.start is not None and _ordered(message_id, self.start):
            return  # older than the read range: the model does not see it
        elif not _ordered(self.last_id, message_id) or not _ordered(self.through, message_id):
            raise Fallback("message order")
        else:
            if is_reply(info):
                parent = str(info["parent_id"])
                if parent in self.replies:
                    raise Fallback("superseded")
                self.replies[parent] = message_id
            self.items[message_id] = {"info": info, "parts": []}
            self.last_id = message_id
            self.order.append(message_id)
            self.kept.append(message_id)
            rendering = item_messages(self.items[message_id])
            self.rendered[message_id] = rendering
            if not self.dirty:
                self.tail_start = len(self.messages)
                self.messages.extend(rendering)

    def _cut(self, through: str | None) -> None:
        """Apply the rolled cut in force after a ``context.updated``: forward, the
        messages it now hides leave the view; back or removed, fall back."""
        if through == self.through:
            return
        if through is None or not _ordered(self.through, through):
            raise Fallback("rolled cut moved back")
        hidden = {i for i in self.order if i <= through}
        self.through = through
        if not hidden:
            return
        self.order = [i for i in self.order if i not in hidden]
        self.kept = [i for i in self.kept if i not in hidden]
        for message_id in hidden:
            self.rendered.pop(message_id, None)
        self.replies = {p: r for p, r in self.replies.items() if r not in hidden}
        self.dirty = True

    def _part(self, part: dict[str, Any]) -> None:
        if part.get("type") == "compaction":
            raise Fallback("compaction part")
        message_id, part_id = str(part["message_id"]), str(part["id"])
        item = self.items.get(message_id)
        if item is None:
            if self.start is not None and _ordered(message_id, self.start):
                return  # a message older than the read range
            raise Fallback("part of an unknown message")
        parts = item["parts"]
        for index in range(len(parts) - 1, -1, -1):
            if parts[index]["id"] == part_id:
                parts[index] = part
                break
        else:
            if parts and not _ordered(str(parts[-1]["id"]), part_id):
                raise Fallback("part order")
            parts.append(part)
        self._render(message_id)

    def _render(self, message_id: str) -> None:
        if message_id not in self.rendered:
            return  # read but not sent (behind a boundary, or superseded)
        rendering = item_messages(self.items[message_id])
        self.rendered[message_id] = rendering
        if not self.dirty and self.kept[-1] == message_id:
            del self.messages[self.tail_start :]
            self.messages.extend(rendering)
        else:
            self.dirty = True

    def history(self) -> list[dict[str, Any]]:
        """The visible history, oldest first: new item dicts and part lists (the info
        and part dicts are shared, and never changed in place by the fold)."""
        items = self.items
        return [{"info": items[i]["info"], "parts": list(items[i]["parts"])} for i in self.order]

    def request(self) -> tuple[str, ModelRequest]:
        if self.dirty:
            self.messages = []
            for message_id in self.kept:
                self.tail_start = len(self.messages)
                self.messages.extend(self.rendered[message_id])
            self.dirty = False
        model = model_of(self.blocks)
        _, _, name = model.partition("/")
        # A copy of the list: the caller may add to it. The message dicts are shared
        # with the cache and are never changed in place (a new rendering replaces them).
        return model, request_with(blocks=self.blocks, messages=list(self.messages), model=name)


class ContextCache:
    """Per-process LRU of :class:`Derived`, keyed by ``(tenant id, session id)``.

    At most ``FORGE_CONTEXT_CACHE_SIZE`` sessions (0 turns the cache off) and
    ``FORGE_CONTEXT_CACHE_MESSAGES`` cached messages in all; the least recently
    used go first. ``stats`` counts hits, misses, fallbacks by reason and the
    events folded (for tests and benchmarks)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[int, str], Derived] = OrderedDict()
        self._lock = threading.Lock()
        self.stats: Counter[str] = Counter()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.stats.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def peek(self, session: Session) -> Derived | None:
        return self._entries.get((session.tenant_id, session.pk))

    def _take(self, key: tuple[int, str]) -> Derived | None:
        with self._lock:
            return self._entries.pop(key, None)

    def _put(self, derived: Derived) -> None:
        size = int(settings.FORGE_CONTEXT_CACHE_SIZE)
        budget = int(settings.FORGE_CONTEXT_CACHE_MESSAGES)
        if len(derived) > budget:
            return
        with self._lock:
            self._entries[(derived.tenant_id, derived.session_id)] = derived
            total = sum(len(d) for d in self._entries.values())
            while self._entries and (len(self._entries) > size or total > budget):
                _, evicted = self._entries.popitem(last=False)
                total -= len(evicted)
                self.stats["evicted"] += 1

    def request(self, session: Session) -> tuple[str, ModelRequest]:
        """The session's next model input at the log's end (see the module's docstring)."""
        return self._serve(session, Derived.request, full_request, request_bytes)

    def history(self, session: Session) -> list[dict[str, Any]]:
        """The visible history at the log's end (``forge.context.visible.visible_history``),
        from the same cached state: the run loop's pruning reads it every turn."""
        return self._serve(session, Derived.history, visible_history, _json)

    def _serve(
        self,
        session: Session,
        read: Callable[[Derived], T],
        full: Callable[[Session], T],
        encode: Callable[[T], str],
    ) -> T:
        """``read`` of the session's state caught up with the log, put back in the cache;
        ``full(session)`` when the cache is off; compared with it under
        ``FORGE_CONTEXT_VERIFY`` (``encode`` gives the bytes compared)."""
        if int(settings.FORGE_CONTEXT_CACHE_SIZE) <= 0:
            return full(session)
        derived = self._current(session)
        result = read(derived)
        self._put(derived)
        if settings.FORGE_CONTEXT_VERIFY:
            verify(session, derived.seq, encode(result), lambda: full(session), encode)
        return result

    def _current(self, session: Session) -> Derived:
        """The session's state caught up with the log (taken out of the cache: the
        caller puts it back)."""
        derived = self._take((session.tenant_id, session.pk))
        if derived is not None:
            try:
                self._catch_up(session, derived)
                self.stats["hit"] += 1
                return derived
            except Fallback as exc:
                self.stats[f"fallback:{exc}"] += 1
        else:
            self.stats["miss"] += 1
        # A short log (a new chat's first turns) is folded from the start: one read of
        # its events instead of the full derivation's several. A long one, or one the
        # fold cannot apply (a compaction boundary ...), is derived in full.
        derived = Derived.empty(session)
        try:
            self._catch_up(session, derived, limit=FOLD_FROM_START_EVENTS)
            self.stats["seeded from start"] += 1
            return derived
        except Fallback as exc:
            self.stats[f"full:{exc}"] += 1
        return Derived.seed(session)

    def _catch_up(self, session: Session, derived: Derived, limit: int | None = None) -> None:
        rows = selectors.log_from(
            tenant=session.tenant, session=session, seq=max(derived.seq, 1), limit=limit
        )
        if limit is not None and len(rows) >= limit:
            raise Fallback("long")
        if derived.seq:
            if not rows or rows[0][0] != derived.seq or rows[0][1] != derived.hash:
                raise Fallback("stale")  # the log it was derived from is gone
            rows = rows[1:]
        for seq, event_hash, type, data in rows:
            derived.fold(seq, event_hash, type, data)
        # Events folded onto a cached state (a short log folded from its start is not one).
        self.stats["folded" if limit is None else "folded from start"] += len(rows)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def verify(
    session: Session, seq: int, have: str, full: Callable[[], Any], encode: Callable[[Any], str]
) -> None:
    """Raise :class:`ContextCacheMismatch` unless ``have`` (a cached result as of ``seq``,
    encoded) is byte-for-byte what ``full`` derives from the log, encoded alike. Skipped
    when the log moved past ``seq`` meanwhile (the two would describe different logs)."""
    expected = full()
    if selectors.log_head(tenant=session.tenant, session=session)[0] != seq:
        return
    want = encode(expected)
    if want != have:
        raise ContextCacheMismatch(
            f"session {session.pk} at seq {seq}: the cached context differs from the log's\n"
            f"full:   {want[:2000]}\ncached: {have[:2000]}"
        )


cache = ContextCache()
