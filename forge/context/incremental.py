"""Incremental context: the next step's model input folded from the events since the
last one, not re-derived from the whole history.

:class:`Derived` (:mod:`forge.context.derived`) is what :func:`forge.context.request_for`
needs for a session as of its event ``seq`` (the read range of the history, the model's
order of it, each message's rendering, the context blocks), in a form that folds further
events. :class:`ContextCache` keeps one per session (a per-process LRU) and, on
a request, reads only the events from the cached ``seq`` on
(``selectors.log_from``) and folds them.

This module holds the cache (:class:`ContextCache`, ``cache``), the full derivation it
must equal (:func:`full_request`) and the check (:func:`verify`). The fold and its own
invariants (the rolled cut, what falls back, folding twice) are in
:mod:`forge.context.derived`; the memory estimate the byte cap bounds is in
:mod:`forge.context.sizing`; the snapshot format in :mod:`forge.context.snapshot`. The
names that moved to ``derived`` and ``sizing`` are re-exported here (``__all__``).

Invariants:

* What the cache returns is byte-for-byte what the full derivation
  (:func:`full_request`) returns from the log at the same seq. With
  ``FORGE_CONTEXT_VERIFY`` on (the test settings) every result is compared with
  it, and a difference raises :class:`ContextCacheMismatch`.
* A cached state is used only while its ``(seq, hash)`` is still in the log: the
  hash chain makes that pair name the whole log up to ``seq``, so a log that was
  deleted, imported again, rolled back or rewritten is never folded onto.
* Whatever the fold does not apply exactly (:class:`Fallback`, see
  :mod:`forge.context.derived`) falls back to the full derivation, which seeds the
  cache again. Falling back is always correct, only slower.
* A state is owned by one request at a time: it leaves the cache while it folds
  (a concurrent request for the same session derives in full).
* The states' estimated memory (:attr:`Derived.cost`, :mod:`forge.context.sizing`) is
  what ``FORGE_CONTEXT_CACHE_BYTES`` bounds: an upper bound of the memory they hold.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.conf import settings

from forge.providers.base import ModelRequest
from sessions import selectors, snapshots
from sessions.models import Session
from sessions.projector import fold_context

from . import snapshot
from .derived import Derived, Fallback
from .messages import build_request, model_of
from .pruning import choose
from .sizing import (
    INTERN_VALUES,
    MEMO_PER_MODEL_MESSAGE,
    MESSAGE_OVERHEAD,
    STATE_OVERHEAD,
    held,
    rebuilt,
    rendering_bytes,
    share_texts,
    size_of,
)
from .visible import visible_history

# Derived and Fallback moved to forge.context.derived, the estimate's constants and
# helpers to forge.context.sizing: re-exported for the importers of this module.
__all__ = [
    "FOLD_FROM_START_EVENTS",
    "INTERN_VALUES",
    "MEMO_PER_MODEL_MESSAGE",
    "MESSAGE_OVERHEAD",
    "STATE_OVERHEAD",
    "ContextCache",
    "ContextCacheMismatch",
    "Derived",
    "Fallback",
    "cache",
    "full_request",
    "held",
    "rebuilt",
    "rendering_bytes",
    "request_bytes",
    "share_texts",
    "size_of",
    "verify",
]

T = TypeVar("T")

# A missing state is folded from the log's start when the log has fewer events than this.
FOLD_FROM_START_EVENTS = 200


class ContextCacheMismatch(AssertionError):
    """``FORGE_CONTEXT_VERIFY``: the cached model input differs from the full derivation."""


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


class ContextCache:
    """Per-process LRU of :class:`Derived`, keyed by ``(tenant id, session id)``.

    Three caps, the least recently used state evicted first until all hold:

    * ``FORGE_CONTEXT_CACHE_BYTES``: the states' estimated memory in all
      (:attr:`Derived.cost`); 0 or less: no byte cap;
    * ``FORGE_CONTEXT_CACHE_SIZE``: sessions (0 turns the cache off);
    * ``FORGE_CONTEXT_CACHE_MESSAGES``: messages held in all.

    A state over the byte or message cap by itself is served but not kept (it would
    evict every other and still not fit). The totals are kept as states come and go
    (never re-summed). ``stats`` counts hits, misses, fallbacks by reason, evictions,
    states too large to keep, and the events folded (for tests and benchmarks)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[int, str], Derived] = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._messages = 0
        self.stats: Counter[str] = Counter()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = self._messages = 0
            self.stats.clear()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """The cached states' estimated memory in all (their ``cost``: what the byte cap
        bounds)."""
        return self._bytes

    def peek(self, session: Session) -> Derived | None:
        return self._entries.get((session.tenant_id, session.pk))

    def _take(self, key: tuple[int, str]) -> Derived | None:
        with self._lock:
            derived = self._entries.pop(key, None)
            if derived is not None:
                self._bytes -= derived.cost
                self._messages -= len(derived)
            return derived

    def _put(self, derived: Derived) -> None:
        size = int(settings.FORGE_CONTEXT_CACHE_SIZE)
        budget = int(settings.FORGE_CONTEXT_CACHE_MESSAGES)
        cap = int(settings.FORGE_CONTEXT_CACHE_BYTES)
        limit = cap if cap > 0 else None
        cost = derived.cost
        if len(derived) > budget or (limit is not None and cost > limit):
            self.stats["too large"] += 1
            return
        key = (derived.tenant_id, derived.session_id)
        with self._lock:
            replaced = self._entries.pop(key, None)  # a concurrent request's, put back first
            if replaced is not None:
                self._bytes -= replaced.cost
                self._messages -= len(replaced)
            self._entries[key] = derived
            self._bytes += cost
            self._messages += len(derived)
            while self._entries and (
                len(self._entries) > size
                or self._messages > budget
                or (limit is not None and self._bytes > limit)
            ):
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.cost
                self._messages -= len(evicted)
                self.stats["evicted"] += 1

    def request(self, session: Session) -> tuple[str, ModelRequest]:
        """The session's next model input at the log's end (see the module's docstring)."""
        return self._serve(session, Derived.request, full_request, request_bytes)

    def history(self, session: Session) -> list[dict[str, Any]]:
        """The visible history at the log's end (``forge.context.visible.visible_history``),
        from the same cached state."""
        return self._serve(session, Derived.history, visible_history, _json)

    def steps_start(
        self, session: Session
    ) -> tuple[list[Mapping[str, Any]], tuple[str, ModelRequest]]:
        """:meth:`prune_choice` and :meth:`request` from one catch-up with the log (one
        read, not two: the run loop asks both before a turn's steps). The request is
        the one before any marking: the caller reads it again after marking."""
        return self._serve(session, _both, _full_both, _both_bytes)

    def prune_choice(self, session: Session) -> list[Mapping[str, Any]]:
        """What pruning marks at the log's end (``forge.context.pruning.choose`` of the
        visible history), from the same cached state: the run loop asks before every
        turn's steps."""
        return self._serve(session, Derived.prune_choice, _full_prune_choice, _ids)

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
            # No cache: the stored snapshot caught up with the log, else the log in full.
            derived = self._from_snapshot(session)
            if derived is None:
                return full(session)
            try:
                result = read(derived)
            except Fallback as exc:  # a snapshot's chunk that does not decode
                self.stats[f"snapshot:{exc}"] += 1
                return full(session)
        else:
            derived = self._current(session)
            try:
                result = read(derived)
            except Fallback as exc:
                self.stats[f"snapshot:{exc}"] += 1
                derived = Derived.seed(session)
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
                derived.sized = True  # served again: worth knowing its messages' lengths
                return derived
            except Fallback as exc:
                self.stats[f"fallback:{exc}"] += 1
        else:
            self.stats["miss"] += 1
            derived = self._from_snapshot(session)
            if derived is not None:
                return derived
        # A short log (a new chat's first turns) is folded from the start: one read of
        # its events instead of the full derivation's several. A long one, or one the
        # fold cannot apply (a compaction boundary ...), is derived in full.
        derived = Derived.empty(session)
        try:
            self._catch_up(session, derived, limit=FOLD_FROM_START_EVENTS)
            self.stats["seeded from start"] += 1
            derived.sized = True  # a short log: its lengths cost little
            return derived
        except Fallback as exc:
            self.stats[f"full:{exc}"] += 1
        return Derived.seed(session)

    def _from_snapshot(self, session: Session) -> Derived | None:
        """The session's stored snapshot caught up with the log, or None (no snapshot, one
        of another format, unreadable, or no longer a prefix of the log, or a tail the
        fold cannot apply): then it is as if there were none."""
        if not settings.FORGE_CONTEXT_SNAPSHOTS:
            return None
        stored = snapshots.read(tenant_id=session.tenant_id, session_id=session.pk)
        if stored is None:
            return None
        fields = snapshot.decode(
            stored.state,
            session_id=session.pk,
            seq=stored.seq,
            hash=stored.hash,
            version=stored.version,
        )
        if fields is None:
            self.stats["snapshot:unreadable"] += 1
            return None
        derived = Derived(tenant_id=session.tenant_id, session_id=session.pk, **fields)
        try:
            self._catch_up(session, derived)
        except Fallback as exc:
            self.stats[f"snapshot:{exc}"] += 1
            return None
        self.stats["snapshot"] += 1
        return derived

    def store_snapshot(self, session: Session, head: int | None = None) -> bool:
        """Store the session's snapshot as of the log's end, in the caller's transaction
        (the turn's last write), when ``FORGE_CONTEXT_SNAPSHOT_EVENTS`` or more events
        came since the newest one stored; True if it did. ``head``: the log's head seq,
        when the caller knows it (what it just appended).

        Not due, it costs nothing when the session's state is cached here (it knows the
        seq of the newest snapshot it stored or loaded), else one small read (the
        stored seq). Due, the state catches up with the log (one read), is encoded, and
        is stored (one upsert); it goes back into the cache (its next request folds
        nothing new)."""
        if not settings.FORGE_CONTEXT_SNAPSHOTS:
            return False
        every = max(1, int(settings.FORGE_CONTEXT_SNAPSHOT_EVENTS))
        cached = int(settings.FORGE_CONTEXT_CACHE_SIZE) > 0
        known = self.peek(session) if cached else None
        if known is not None and head is not None:
            if head - known.snapshot_seq < every:
                return False
        elif known is None:
            stored = snapshots.read_seq(tenant_id=session.tenant_id, session_id=session.pk)
            if head is None:
                head = selectors.log_head(tenant=session.tenant, session=session)[0]
            if head - stored < every:
                return False
        derived = self._current(session)
        try:
            if derived.seq - derived.snapshot_seq < every:
                return False
            try:
                blob = snapshot.encode(derived)
            except snapshot.Unencodable as exc:
                self.stats[f"snapshot unencodable: {exc}"[:80]] += 1
                return False
            except (Fallback, snapshot.ChunkUnreadable) as exc:
                # a chunk it was decoded from does not decode (merging it, or unpacking)
                unreadable = isinstance(exc, snapshot.ChunkUnreadable)
                self.stats[
                    "snapshot:snapshot chunk unreadable" if unreadable else f"snapshot:{exc}"
                ] += 1
                cached = False  # not put back: the next request derives anew
                return False
            snapshots.write(
                tenant_id=session.tenant_id,
                session_id=session.pk,
                seq=derived.seq,
                hash=derived.hash,
                version=snapshot.VERSION,
                state=blob,
            )
            derived.snapshot_seq = derived.seq
            self.stats["snapshot stored"] += 1
            return True
        finally:
            if cached:
                self._put(derived)

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


def _full_prune_choice(session: Session) -> list[Mapping[str, Any]]:
    return choose(visible_history(session))


def _both(derived: Derived) -> tuple[list[Mapping[str, Any]], tuple[str, ModelRequest]]:
    return derived.prune_choice(), derived.request()


def _full_both(session: Session) -> tuple[list[Mapping[str, Any]], tuple[str, ModelRequest]]:
    return _full_prune_choice(session), full_request(session)


def _both_bytes(result: tuple[list[Mapping[str, Any]], tuple[str, ModelRequest]]) -> str:
    return _ids(result[0]) + "\n" + request_bytes(result[1])


def _ids(parts: list[Mapping[str, Any]]) -> str:
    return json.dumps([[part["id"], part.get("state")] for part in parts], ensure_ascii=False)


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
