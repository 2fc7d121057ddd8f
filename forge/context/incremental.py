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
* :attr:`Derived.nbytes` is the state's estimated memory, kept up to date by the
  fold (see :func:`held`); it depends only on what the state holds, so a state
  folded to ``seq`` and one seeded at ``seq`` from the same log estimate alike
  (unless a rolled cut moved forward meanwhile: the folded state still holds the
  messages it hid, which a seed may not read). The snapshot memo's chunks are
  counted apart (:attr:`Derived.memo_bytes`); the cache holds at most
  ``FORGE_CONTEXT_CACHE_BYTES`` of both (:attr:`Derived.cost`) in all, an upper
  bound of the memory the states hold (measured with ``tracemalloc``).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from django.conf import settings

from forge.providers.base import ModelRequest
from sessions import selectors, snapshots
from sessions.models import Session
from sessions.projector import apply_context, fold_context

from . import snapshot
from .compacted import filter_compacted
from .messages import build_request, item_messages, model_of, request_with
from .pruning import candidate_tokens, choose
from .rolled import drop_rolled, is_generated, rolled_through
from .superseded import drop_superseded, is_reply
from .visible import read_history, visible_history

T = TypeVar("T")

# A missing state is folded from the log's start when the log has fewer events than this.
FOLD_FROM_START_EVENTS = 200

# The estimate (see ``held``): the fixed cost of one message in a state beyond its
# info, parts and rendering (its ``items`` entry and ``{info, parts}`` dict, its
# parts list, its slots in ``order``, ``kept``, ``rendered`` and ``messages``, its
# ``sizes`` list: 600; its entries in ``appended`` and ``tool_tokens``, whether it has
# them or not: 128 and 152), and of a state (the dataclass, its containers, empty, and
# the ``rest`` tuple). From sys.getsizeof of each on CPython 3.11, a hash table's entry
# counted as just after the table grew (the most it costs an entry).
MESSAGE_OVERHEAD = 880
STATE_OVERHEAD = 4_000
# The request's length memos, per model message of ``messages``: its ``chars`` entry
# (the dict's slot, the (dict, length) tuple and the length: up to 152 + 56 + 32 by
# tracemalloc) and its ``prefix`` slot and sum (40). Counted with the rendering, whether
# the memos hold it yet or not (they do once the state is served again), so the
# estimate still depends only on what the state derives from.
MEMO_PER_MODEL_MESSAGE = 280
# String values up to this long are interned too: roles, part types, finish reasons,
# statuses, repeated in every turn. Longer ones (ids, times, texts) are mostly unique,
# and an interned string costs an entry in the interpreter's table.
INTERN_VALUES = 16
_POINTER = 8
_LIST = sys.getsizeof([])


def held(value: Any, shared: Mapping[str, str] | None = None) -> tuple[Any, int]:
    """``(value, bytes)``: a JSON value rebuilt with its strings shared where they
    repeat, and the memory it holds by CPython's own sizes (``sys.getsizeof`` of each
    dict, string and number; a list as its header and slots; ``None`` and booleans
    nothing).

    Each decoded event has its own copy of every key (``"message_id"``,
    ``"session_id"`` ...) and of every value, though most repeat in every event.
    Rebuilt, the keys and the short values (:data:`INTERN_VALUES`) are interned
    (``sys.intern``: one object per distinct string in the process, freed with its
    last user), and a value equal to a key of ``shared`` becomes that mapping's
    object (the session's id, the message's id in its parts). Counted as free: the
    keys (a small vocabulary) and the ``shared`` values (held once by the state);
    every other value is counted whether it ended up shared or not, so the number
    depends on the value alone (never on what else the process holds) and errs
    high. Equal strings, keys in the same order: the rebuilt value's JSON is the
    original's, byte for byte."""
    if isinstance(value, str):
        if shared is not None and value in shared:
            return shared[value], 0
        return (sys.intern(value) if len(value) <= INTERN_VALUES else value), sys.getsizeof(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        size = 0
        for key, item in value.items():
            out[sys.intern(key)], item_size = held(item, shared)
            size += item_size
        return out, size + sys.getsizeof(out)
    if isinstance(value, list):
        rebuilt = [held(item, shared) for item in value]
        return [v for v, _ in rebuilt], sum(n for _, n in rebuilt) + _LIST + _POINTER * len(value)
    if value is None or isinstance(value, bool):
        return value, 0  # singletons
    return value, sys.getsizeof(value)


def rebuilt(value: Any, shared: Mapping[str, str]) -> Any:
    """``held(value, shared)[0]`` without counting: for a value already counted (an item
    decoded from a snapshot chunk, whose sizes the chunk holds)."""
    if isinstance(value, str):
        if value in shared:
            return shared[value]
        return sys.intern(value) if len(value) <= INTERN_VALUES else value
    if isinstance(value, dict):
        return {sys.intern(key): rebuilt(item, shared) for key, item in value.items()}
    if isinstance(value, list):
        return [rebuilt(item, shared) for item in value]
    return value


def size_of(value: Any) -> int:
    """What :func:`held` counts for ``value`` without ``shared``, without rebuilding it."""
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(size_of(v) for v in value.values())
    if isinstance(value, list):
        return _LIST + _POINTER * len(value) + sum(size_of(v) for v in value)
    if value is None or isinstance(value, bool):
        return 0
    return sys.getsizeof(value)


def rendering_bytes(rendering: list[dict[str, Any]], item: Mapping[str, Any]) -> int:
    """The memory one message's rendering holds beyond its item's: counted like
    :func:`held`, less a content string that is its part's text itself (a message
    of one text part renders to that very string object), plus the request's length
    memos for each of its model messages (:data:`MEMO_PER_MODEL_MESSAGE`)."""
    texts = {id(part["text"]) for part in item["parts"] if isinstance(part.get("text"), str)}
    size = size_of(rendering) + MEMO_PER_MODEL_MESSAGE * len(rendering)
    for message in rendering:
        content = message.get("content")
        if isinstance(content, str) and id(content) in texts:
            size -= sys.getsizeof(content)
    return size


def share_texts(rendering: list[dict[str, Any]], item: Mapping[str, Any]) -> None:
    """Make a decoded rendering's contents that equal a text of its item's parts that
    very string, as :func:`forge.context.messages.item_messages` renders them (a
    message of one text part renders to the part's text itself), and as
    :func:`rendering_bytes` counts them: decoded apart, each would be held twice. The
    value is an equal string, so the message's JSON (and its length memo) is the same;
    the dict is changed in place, its key's value swapped, nothing else."""
    texts = {p["text"]: p["text"] for p in item["parts"] if isinstance(p.get("text"), str)}
    if not texts:
        return
    for message in rendering:
        content = message.get("content")
        if isinstance(content, str):
            text = texts.get(content)
            if text is not None and text is not content:
                message["content"] = text


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
    """The derived context of one session as of event ``seq`` (whose hash is ``hash``).

    ``nbytes`` estimates the memory the state holds: each message's info and parts
    as :func:`held` counts them (computed once, when an event brings them, and kept
    per part in ``sizes`` so that a replaced part or info swaps its own count), its
    rendering as :func:`rendering_bytes` counts it (when it is rendered; with the
    request's length memos for it, ``chars`` and ``prefix``), a fixed
    :data:`MESSAGE_OVERHEAD` per message (with its ``appended`` and ``tool_tokens``
    entries), the context blocks (counted again at each ``context.updated``: the
    blocks, never the whole state) and :data:`STATE_OVERHEAD`. It depends only on
    what the state derives from (a seed of the same log counts the same), so the
    one memo that depends on the state's past, the snapshot's chunks, is counted
    apart: ``memo_bytes`` (set where ``chunks`` and ``rchunks`` are). ``cost``, their
    sum, is what the cache's byte cap bounds.

    An upper bound of what the state holds by ``tracemalloc`` (the memory freed when
    it leaves the cache): the length memo holds only dicts that are in ``messages``
    (a rendering's entries leave it when the rendering is replaced or hidden), and
    each hash table's entry is counted as just after the table grew. Measured
    (``bench/cache_memory.py --trace``, CPython 3.11, turns of ~400 characters a
    side, snapshots stored) freed / cost is 0.82 at 2,000 turns over 100 sessions
    (0.99 before the memos were counted); 0.75-0.86 for tiny turns, tool outputs
    with stored snapshots, replies read between steps and a state unpacked from a
    snapshot (``test_the_estimate_bounds_the_memory_each_state_holds``), ~0.35 for a
    lazy one (estimated as if unpacked). What a process's RSS pays for it
    is more (the allocators' rounding and the free space they keep after an
    eviction: ``bench/daphne_rss.py``). A message hidden by the rolled cut keeps its
    info and parts (a later event about it still needs them), so it keeps their
    count; its rendering's leaves it.
    """

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
    # message id -> [info bytes, rendering bytes (0: not rendered), each part's bytes]
    sizes: dict[str, list[int]] = field(default_factory=dict)
    blocks_bytes: int = 0
    # message id -> what its completed, unpruned tool outputs cost the model (only ids
    # with some): their sum bounds what pruning can choose (:meth:`prune_choice`)
    tool_tokens: dict[str, int] = field(default_factory=dict)
    nbytes: int = STATE_OVERHEAD  # the estimate: what ``sizes`` and ``blocks_bytes`` sum to
    # The snapshot memo (forge.context.snapshot): compressed chunks of items and their
    # sizes, holding the ``chunked`` items added before ``appended`` (the ids added
    # since). ``lazy`` (a state decoded from a snapshot, until ``unpack``): the chunks'
    # items and sizes are not in ``items`` and ``sizes``, and the renderings of the first
    # ``len(lengths)`` kept messages are only in ``messages`` (``lengths[i]`` each).
    chunks: list[bytes] = field(default_factory=list)
    chunked: int = 0
    appended: set[str] = field(default_factory=set)
    lazy: bool = False
    lengths: list[int] | None = None
    # The renderings' memo: compressed chunks of the first ``rchunked`` kept messages'
    # renderings (unchanged since: a change to one of them drops both memos).
    rchunks: list[bytes] = field(default_factory=list)
    rchunked: int = 0
    snapshot_seq: int = 0  # the newest snapshot this state knows is stored (0: none)
    # id(model message dict) -> (that dict, its JSON length): each message of ``messages``
    # encoded once, for the compaction's estimate (:meth:`messages_chars`). The dict is
    # held, so its id is not reused while the entry lives; dicts are never changed in place
    # (but for ``share_texts``, which swaps a value for an equal string: same JSON).
    chars: dict[int, tuple[dict[str, Any], int]] = field(default_factory=dict, repr=False)
    # (the blocks it was derived from, the model name, the request's JSON length without
    # its messages): the same until a context block changes (``blocks`` is then replaced)
    rest: tuple[dict[str, Any], str, int] | None = field(default=None, repr=False)
    # The JSON lengths of ``messages[:len(prefix)]``, summed cumulatively: cut where
    # ``messages`` is cut, so a request adds only its new messages' lengths.
    prefix: list[int] = field(default_factory=list, repr=False)
    # Whether requests carry ``messages_chars``: not for a state loaded for one request
    # (a cold load: encoding its whole history would cost what the estimate saves), from
    # its first reuse on (a cache hit), or for a short log folded from its start.
    sized: bool = field(default=False, repr=False)
    # What ``chunks`` and ``rchunks`` hold (``snapshot.chunk_bytes``): set wherever they are.
    memo_bytes: int = 0

    @property
    def cost(self) -> int:
        """The state's estimated memory in all: ``nbytes`` and the snapshot memo's
        chunks (what the cache's byte cap bounds)."""
        return self.nbytes + self.memo_bytes

    @classmethod
    def seed(cls, session: Session) -> Derived:
        """The full derivation, kept in foldable form. The head is read first: whatever
        is appended meanwhile is folded again on the next request, harmlessly."""
        tenant = session.tenant
        seq, head_hash = selectors.log_head(tenant=tenant, session=session)
        blocks = fold_context(selectors.context_updates(tenant=tenant, session=session))
        through = rolled_through(blocks)
        read, start = read_history(session, through)
        history: list[dict[str, Any]] = []
        sizes: dict[str, list[int]] = {}
        for item in read:
            info, info_size = _held_info(item["info"], session.pk)
            parts = [_held_part(part, session.pk, info["id"]) for part in item["parts"]]
            history.append({"info": info, "parts": [part for part, _ in parts]})
            sizes[str(info["id"])] = [info_size, 0, *(size for _, size in parts)]
        blocks, blocks_bytes = held(blocks)
        visible = drop_rolled(filter_compacted(history), through)
        kept = drop_superseded(visible)
        derived = cls(
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
            sizes=sizes,
            blocks_bytes=blocks_bytes,
        )
        for message_id, rendering in derived.rendered.items():
            sizes[message_id][1] = rendering_bytes(rendering, derived.items[message_id])
        for item in visible:
            derived._tools(str(item["info"]["id"]), item["parts"])
        derived.nbytes = derived._total()
        return derived

    def _total(self) -> int:
        """The estimate summed from ``sizes`` (at a seed; the fold keeps it after)."""
        self.unpack()  # a decoded state's sizes are in its chunks
        return (
            STATE_OVERHEAD
            + self.blocks_bytes
            + sum(sum(s) for s in self.sizes.values())
            + MESSAGE_OVERHEAD * len(self.sizes)
        )

    def _resize(self, message_id: str, index: int, size: int) -> None:
        sizes = self.sizes[message_id]
        self.nbytes += size - sizes[index]
        sizes[index] = size

    @classmethod
    def empty(cls, session: Session) -> Derived:
        """The derived context of an empty log (seq 0): folding a short log from here is
        cheaper than the full derivation's reads (see ``ContextCache._current``)."""
        derived = cls(
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
            blocks_bytes=held({})[1],
        )
        derived.nbytes = derived._total()
        return derived

    def __len__(self) -> int:
        return len(self.items) + (self.chunked if self.lazy else 0)

    def unpack(self) -> None:
        """Decode what a snapshot left in chunks, and split the joined renderings per
        message: the first need of an old item (its fold, ``history``, a moved cut).

        The decoded items are rebuilt as a seed holds them (:func:`rebuilt`: keys
        interned, the session's and the message's ids shared, the message's id the
        chunk's key), the ids in ``order``, ``kept`` and ``replies`` become the items'
        own (``tool_tokens``' and ``last_id`` too), and the renderings' texts their
        parts' (:func:`share_texts`): decoded, each of those is a copy of its own, which
        the estimate (a seed's) does not count."""
        if not self.lazy:
            return
        items: dict[str, dict[str, Any]] = {}
        sizes: dict[str, list[int]] = {}
        session = self.session_id
        try:
            for chunk in self.chunks:
                for message_id, (item, size) in snapshot.unpack_items(chunk).items():
                    shared = {session: session, message_id: message_id}
                    items[message_id] = {
                        "info": rebuilt(item["info"], shared),
                        "parts": [rebuilt(part, shared) for part in item["parts"]],
                    }
                    sizes[message_id] = size
        except Exception as exc:
            raise Fallback("snapshot chunk unreadable") from exc
        items.update(self.items)
        sizes.update(self.sizes)
        ids = {key: key for key in items}
        self.order = [ids.get(i, i) for i in self.order]
        self.kept = [ids.get(i, i) for i in self.kept]
        self.replies = {ids.get(p, p): ids.get(r, r) for p, r in self.replies.items()}
        self.tool_tokens = {ids.get(i, i): n for i, n in self.tool_tokens.items()}
        self.last_id = ids.get(self.last_id, self.last_id) if self.last_id else self.last_id
        rendered: dict[str, list[dict[str, Any]]] = {}
        at = 0
        # Only new messages were added to ``kept`` and ``messages`` since: the old ones are
        # still their prefixes (anything else unpacks first).
        for message_id, length in zip(self.kept, self.lengths or (), strict=False):
            rendered[message_id] = self.messages[at : at + length]
            share_texts(rendered[message_id], items[message_id])
            at += length
        rendered.update(self.rendered)
        self.items, self.sizes, self.rendered = items, sizes, rendered
        self.lengths = None
        self.lazy = False

    def forget_chunks(self) -> None:
        """Drop the snapshot memo (after ``unpack``): the next snapshot packs all anew."""
        self.chunks, self.chunked, self.appended = [], 0, set()
        self.rchunks, self.rchunked = [], 0
        self.memo_bytes = 0

    def joined(self) -> list[dict[str, Any]]:
        """The kept messages' renderings, joined (``messages``, joined again if dirty)."""
        if self.dirty:
            self.messages = []
            self.prefix = []
            for message_id in self.kept:
                self.tail_start = len(self.messages)
                self.messages.extend(self.rendered[message_id])
            self.dirty = False
        return self.messages

    def render_lengths(self) -> list[int]:
        """How many model messages each kept message renders to, in ``kept``'s order."""
        old = self.lengths or []
        return [*old, *(len(self.rendered[i]) for i in self.kept[len(old) :])]

    def _item(self, message_id: str) -> dict[str, Any] | None:
        """The read item ``message_id``, or None; decodes the chunks only for an id that
        may be in them (not one newer than every item)."""
        item = self.items.get(message_id)
        if item is None and self.lazy and not _ordered(self.last_id, message_id):
            self.unpack()
            item = self.items.get(message_id)
        return item

    def _changed(self, message_id: str) -> None:
        """An item changed in place: a chunk holding its old value is no memo any more."""
        if self.chunks and message_id not in self.appended:
            self.unpack()
            self.forget_chunks()

    def fold(self, seq: int, event_hash: str, type: str, data: Any) -> None:
        """Apply event ``seq`` (raises :class:`Fallback` when it cannot)."""
        if type == "message.updated":
            self._message(data)
        elif type == "part.updated":
            self._part(data)
        elif type == "context.updated":
            apply_context(self.blocks, data)
            self.blocks, size = held(self.blocks)  # the blocks, not the state: a few per turn
            self.nbytes += size - self.blocks_bytes
            self.blocks_bytes = size
            self._cut(rolled_through(self.blocks))
        elif type not in ("session.created", "session.updated"):  # those change no input
            raise Fallback(type)  # session.compacted, removals, anything new
        self.seq, self.hash = seq, event_hash

    def _message(self, data: dict[str, Any]) -> None:
        if data.get("summary"):
            raise Fallback("summary")  # a boundary begins, changes or closes
        info, info_size = _held_info(data, self.session_id)
        message_id = str(info["id"])
        item = self._item(message_id)
        if item is not None:
            old = item["info"]
            for key in ("role", "parent_id", "summary"):
                if old.get(key) != info.get(key):
                    raise Fallback(f"message {key}")
            self._changed(message_id)
            item["info"] = info
            self._resize(message_id, 0, info_size)
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
            self.appended.add(message_id)
            self.last_id = message_id
            self.order.append(message_id)
            self.kept.append(message_id)
            rendering = item_messages(self.items[message_id])
            self.rendered[message_id] = rendering
            self.sizes[message_id] = [info_size, rendering_bytes(rendering, self.items[message_id])]
            self.nbytes += info_size + self.sizes[message_id][1] + MESSAGE_OVERHEAD
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
        self.unpack()  # the renderings it drops, and their sizes
        self.forget_chunks()  # the sizes and the kept messages change
        self.order = [i for i in self.order if i not in hidden]
        self.kept = [i for i in self.kept if i not in hidden]
        for message_id in hidden:
            old = self.rendered.pop(message_id, None)
            if old is not None:
                self._resize(message_id, 1, 0)
                self._unsized(old)
            self.tool_tokens.pop(message_id, None)
        self.replies = {p: r for p, r in self.replies.items() if r not in hidden}
        self.dirty = True

    def _part(self, data: dict[str, Any]) -> None:
        if data.get("type") == "compaction":
            raise Fallback("compaction part")
        message_id = str(data["message_id"])
        item = self._item(message_id)
        if item is None:
            if self.start is not None and _ordered(message_id, self.start):
                return  # a message older than the read range
            raise Fallback("part of an unknown message")
        part, part_size = _held_part(data, self.session_id, item["info"]["id"])
        part_id = str(part["id"])
        self._changed(message_id)
        parts = item["parts"]
        for index in range(len(parts) - 1, -1, -1):
            if parts[index]["id"] == part_id:
                parts[index] = part
                self._resize(message_id, 2 + index, part_size)
                break
        else:
            if parts and not _ordered(str(parts[-1]["id"]), part_id):
                raise Fallback("part order")
            parts.append(part)
            self.sizes[message_id].append(part_size)
            self.nbytes += part_size
        self._tools(message_id, parts)
        self._render(message_id)

    def _tools(self, message_id: str, parts: list[dict[str, Any]]) -> None:
        tokens = candidate_tokens(parts)
        if tokens:
            self.tool_tokens[message_id] = tokens
        else:
            self.tool_tokens.pop(message_id, None)

    def _render(self, message_id: str) -> None:
        old = self.rendered.get(message_id)
        if old is None:
            return  # read but not sent (behind a boundary, or superseded)
        rendering = item_messages(self.items[message_id])
        self.rendered[message_id] = rendering
        self._resize(message_id, 1, rendering_bytes(rendering, self.items[message_id]))
        self._unsized(old)
        if not self.dirty and self.kept[-1] == message_id:
            del self.messages[self.tail_start :]
            del self.prefix[self.tail_start :]
            self.messages.extend(rendering)
        else:
            # Joined again from every kept message's rendering: a state decoded from a
            # snapshot has the old ones only inside ``messages`` until it unpacks, which
            # must happen while ``messages`` still holds them.
            self.unpack()
            self.dirty = True

    def _unsized(self, rendering: list[dict[str, Any]]) -> None:
        """A rendering left ``rendered`` (replaced, or hidden by the cut): its messages'
        length memo entries go with it, so that ``chars`` holds only dicts of
        ``messages`` (what :data:`MEMO_PER_MODEL_MESSAGE` counts), never an old one."""
        memo = self.chars
        if memo:
            for message in rendering:
                memo.pop(id(message), None)

    def history(self) -> list[dict[str, Any]]:
        """The visible history, oldest first: new item dicts and part lists (the info
        and part dicts are shared, and never changed in place by the fold)."""
        self.unpack()
        items = self.items
        return [{"info": items[i]["info"], "parts": list(items[i]["parts"])} for i in self.order]

    def prune_choice(self) -> list[Mapping[str, Any]]:
        """The tool parts pruning marks now (``forge.context.pruning.choose`` of the
        visible history); none, without reading the history, while all the outputs it
        could choose from cost less than ``FORGE_PRUNE_MINIMUM_TOKENS`` together (a chat
        with few or no tool calls: every turn of it)."""
        if sum(self.tool_tokens.values()) < int(settings.FORGE_PRUNE_MINIMUM_TOKENS):
            return []
        return choose(self.history())

    def request(self) -> tuple[str, ModelRequest]:
        messages = self.joined()
        model = model_of(self.blocks)
        _, _, name = model.partition("/")
        # A copy of the list: the caller may add to it. The message dicts are shared
        # with the cache and are never changed in place (a new rendering replaces them; an
        # unpack may swap a content for an equal string, ``share_texts``).
        request = request_with(
            blocks=self.blocks,
            messages=list(messages),
            model=name,
            messages_chars=self.messages_chars() if self.sized else None,
        )
        if not self.sized:
            return model, request  # the estimate encodes it whole, as it would anyway
        known = self.rest
        if known is None or known[0] is not self.blocks or known[1] != name:
            body = {**request.as_dict(), "messages": []}
            known = self.rest = (self.blocks, name, len(json.dumps(body, ensure_ascii=False)))
        return model, replace(request, rest_chars=known[2])

    def messages_chars(self) -> int:
        """``len(json.dumps(self.messages, ensure_ascii=False))``, encoding only the messages
        not seen before (a turn's new ones): the list's brackets and ``", "`` separators
        plus each message's own length. The memo holds only messages of ``messages``
        (:meth:`_unsized` drops a rendering's entries when it leaves); more entries than
        messages would break that, and are dropped (never seen: a guard)."""
        messages, prefix, memo = self.messages, self.prefix, self.chars
        if len(memo) > len(messages):
            memo = self.chars = {id(m): memo[id(m)] for m in messages if id(m) in memo}
        total = prefix[-1] if prefix else 0
        for message in messages[len(prefix) :]:
            known = memo.get(id(message))
            if known is None:
                known = memo[id(message)] = (message, len(json.dumps(message, ensure_ascii=False)))
            total += known[1]
            prefix.append(total)
        return total + len("[]") + len(", ") * max(len(messages) - 1, 0)


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
            except Fallback as exc:  # a chunk it was decoded from does not decode
                self.stats[f"snapshot:{exc}"] += 1
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


def _held_info(data: dict[str, Any], session_id: str) -> tuple[dict[str, Any], int]:
    """A message's info as a state holds it (:func:`held`): its session id shared."""
    info, size = held(data, {session_id: session_id})
    return info, size


def _held_part(
    data: dict[str, Any], session_id: str, message_id: str
) -> tuple[dict[str, Any], int]:
    """A part as a state holds it (:func:`held`): its session's and its message's ids
    shared (the message's is counted with its info)."""
    part, size = held(data, {session_id: session_id, message_id: message_id})
    return part, size


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
