"""The derived context of one session, in a form that folds further events.

:class:`Derived` is what :func:`forge.context.request_for` needs for a session
as of its event ``seq`` (the read range of the history, the model's order of it,
each message's rendering, the context blocks). :mod:`forge.context.incremental` keeps
one per session and folds onto it the events since (:meth:`Derived.fold`);
:mod:`forge.context.sizing` estimates the memory it holds; :mod:`forge.context.snapshot`
stores it.

Invariants of the fold:

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
* Folding an event twice is harmless (a seed reads the head before the history,
  so the events between are folded again onto a state that already has them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from forge.providers.base import ModelRequest
from sessions import selectors
from sessions.models import Session
from sessions.projector import fold_context

from . import snapshot
from .compacted import filter_compacted
from .folding import Fallback, Folding
from .messages import item_messages, model_of, request_with
from .pruning import choose
from .rolled import drop_rolled, rolled_kept, rolled_through
from .sizing import (
    MESSAGE_OVERHEAD,
    STATE_OVERHEAD,
    held,
    held_info,
    held_part,
    rebuilt,
    rendering_bytes,
    share_texts,
)
from .superseded import drop_superseded, is_reply
from .visible import read_history


@dataclass
class Derived(Folding):
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
    apart: ``memo_bytes`` (set where the chunks are). ``cost``, their
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
    # The lists' memo: compressed chunks of the first ``hchunked`` ids of ``order``,
    # ``kept`` and ``replies`` (which only grow until the memos are dropped).
    hchunks: list[bytes] = field(default_factory=list)
    hchunked: tuple[int, int, int] = (0, 0, 0)
    # The renderings' memo: compressed chunks of the first ``rchunked`` kept messages'
    # renderings, ``rmessages`` model messages (unchanged since: a change to one of them
    # drops the memos).
    rchunks: list[bytes] = field(default_factory=list)
    rchunked: int = 0
    rmessages: int = 0
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
    # What ``chunks``, ``hchunks`` and ``rchunks`` hold (``snapshot.chunk_bytes``): set
    # wherever they are.
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
        through, kept_below = rolled_through(blocks), rolled_kept(blocks)
        # Messages kept in view below the cut are older than it: read from the boundary.
        read, start = read_history(session, None if kept_below else through)
        history: list[dict[str, Any]] = []
        sizes: dict[str, list[int]] = {}
        for item in read:
            info, info_size = held_info(item["info"], session.pk)
            parts = [held_part(part, session.pk, info["id"]) for part in item["parts"]]
            history.append({"info": info, "parts": [part for part, _ in parts]})
            sizes[str(info["id"])] = [info_size, 0, *(size for _, size in parts)]
        blocks, blocks_bytes = held(blocks)
        visible = drop_rolled(filter_compacted(history), through, kept_below)
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
        self.hchunks, self.hchunked = [], (0, 0, 0)
        self.rchunks, self.rchunked, self.rmessages = [], 0, 0
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
