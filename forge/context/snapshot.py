"""The snapshot format: a :class:`forge.context.derived.Derived` as bytes, and back.

A snapshot lets a process that never served a session (after a deploy, on another
daphne, past the cache's capacity) load its next model input from one row instead
of folding the whole log: it decodes the snapshot and folds only the events after
it. ``sessions.snapshots`` stores the bytes; this module encodes and checks them.

Format (:data:`VERSION` 5)::

    MAGIC (4 bytes: b"FCS" + version) | crc32 of the body (4 bytes, big-endian) | body
    body = msgpack [session id, seq, hash, head, [list chunk, ...],
                    [rendered chunk, ...], [chunk, ...]]
    head = zlib(msgpack [start, through, last_id, blocks, blocks_bytes, nbytes,
                         items in chunks, tool_tokens])
    list chunk = zlib(msgpack [order, kept, replies]): the lists' next ids, joined in
                 chunk order
    replies = [[parent id, reply id], ...]; tool_tokens = [[message id, tokens], ...]
    rendered chunk = zlib(msgpack [lengths, messages])
    chunk = zlib(msgpack [[message id, {info, parts}, sizes], ...])

Nothing is a map keyed by message ids: msgpack interns every map key it decodes
(``sys.intern``), and interned ids would grow the interpreter's table of interned
strings with the sessions a process loads (a table never shrinks).

The head, the list chunks and the rendered chunks are what a request needs, decoded
at load: the ids in order, the blocks, and the kept messages' renderings, joined (in kept
order; ``lengths``: how many model messages each kept message renders to). The
read history's items (every message's info and parts, and their ``sizes``) are in
chunks, decoded only when the fold,
:meth:`Derived.history` or a moved rolled cut first needs an old item: a cold
request never decodes them, and neither does folding the next turn onto it.
Every kind of chunk is also the encoder's memo: a state keeps the chunks it last
encoded (compressed, a few % of the state) and the next snapshot packs only the
items, ids and renderings added since, as one more chunk of each, until a change to
an old item or a moved rolled cut drops them. The newest chunks merge as a binary
counter's digits do (:func:`tiered`), so a snapshot costs what is new plus O(log n)
amortized, not the whole history: at 1,600 turns, repacking the lists every snapshot
and all items every eighth made an append's mean 1.7 x its median, its p99 11 x.

msgpack keeps what JSON gives exactly (map order, str, int, float64, bool, None),
so a decoded state renders byte for byte what the encoded one did; a state it
cannot hold (an integer beyond 64 bits, a lone surrogate) is not snapshotted.

Trust: a snapshot is a cache. :func:`decode` refuses any blob whose magic,
version, checksum, session or key differ from the row's (returns None); the
caller then uses it only if its ``(seq, hash)`` is still in the log.
"""

from __future__ import annotations

import logging
import struct
import sys
import zlib
from collections.abc import Callable
from itertools import islice
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from .derived import Derived

logger = logging.getLogger(__name__)

# 2: the head holds ``tool_tokens``; 3: ``sizes`` and ``nbytes`` count the request's
# length memos (``sizing.MEMO_PER_MODEL_MESSAGE``, ``MESSAGE_OVERHEAD``: a state
# decoded from version 2 would keep a lower estimate than its seed), and the maps keyed
# by message ids are lists of pairs.
# 4: ``order``, ``kept`` and ``replies`` leave the head for chunks of their own, packed
# as the lists grow (each snapshot packed them whole: O(n) per snapshot).
# 5: the blocks' keys in canonical order (``sessions.log.in_canonical_order``); a
# version 4 snapshot on PostgreSQL holds them in jsonb's order.
# 6: the rolled cut also hides the compactions it holds all of
# (``rolled.passed_boundaries``): a version 5 ``order`` may still show their summaries.
VERSION = 6
MAGIC = b"FCS" + bytes([VERSION])
LEVEL = 1  # zlib: the fastest level; the text compresses ~10x at it already
MAX_CHUNKS = 16  # of a kind; more, and the newest two merge whatever their sizes
_PREFIX = struct.Struct(">4sI")
# A chunk's memory beyond its length: the bytes object's header and its list slot.
CHUNK_OVERHEAD = sys.getsizeof(b"") + 8


class Unencodable(ValueError):
    """The state holds a value msgpack cannot carry exactly."""


def _pack(value: Any) -> bytes:
    try:
        return zlib.compress(msgpack.packb(value, use_bin_type=True), LEVEL)
    except (TypeError, ValueError, OverflowError) as exc:  # UnicodeEncodeError is a ValueError
        raise Unencodable(str(exc)) from exc


def _unpack(blob: bytes) -> Any:
    return msgpack.unpackb(zlib.decompress(blob), raw=False, strict_map_key=True)


def unpack_items(chunk: bytes) -> dict[str, list[Any]]:
    """One chunk: ``{message id: [item, sizes]}`` (``Derived.items`` and ``Derived.sizes``)."""
    rows = _unpack(chunk)
    if not isinstance(rows, list):
        raise ValueError("a chunk is not a list")
    return {message_id: [item, sizes] for message_id, item, sizes in rows}


def chunk_bytes(*lists: list[bytes]) -> int:
    """The memory the chunk lists hold (``Derived.memo_bytes``): their bytes, their
    overhead (:data:`CHUNK_OVERHEAD`)."""
    return sum(len(chunk) + CHUNK_OVERHEAD for chunks in lists for chunk in chunks)


def _array(raw: bytes, at: int = 0) -> tuple[int, int]:
    """The length of the msgpack array at ``raw[at]``, and where its first element is."""
    first = raw[at]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F, at + 1
    if first == 0xDC:
        return int.from_bytes(raw[at + 1 : at + 3], "big"), at + 3
    if first == 0xDD:
        return int.from_bytes(raw[at + 1 : at + 5], "big"), at + 5
    raise ValueError("not a msgpack array")


def _array_header(length: int) -> bytes:
    if length < 16:
        return bytes([0x90 | length])
    if length < 1 << 16:
        return b"\xdc" + length.to_bytes(2, "big")
    return b"\xdd" + length.to_bytes(4, "big")


def merge_items(older: bytes, newer: bytes) -> bytes:
    """Two item chunks as one: their encoded elements joined under one array header,
    none decoded (decoding the items into dicts cost twice what packing them did)."""
    bodies, count = [], 0
    for chunk in (older, newer):
        raw = zlib.decompress(chunk)
        length, at = _array(raw)
        bodies.append(raw[at:])
        count += length
    return zlib.compress(_array_header(count) + b"".join(bodies), LEVEL)


def merge_rendered(older: bytes, newer: bytes) -> bytes:
    """Two rendered chunks (``[lengths, messages]``) as one: the lengths decoded and
    joined, the messages' encoded elements joined (not decoded)."""
    lengths: list[int] = []
    bodies, count = [], 0
    for chunk in (older, newer):
        raw = zlib.decompress(chunk)
        pair, at = _array(raw)
        if pair != 2:
            raise ValueError("a rendered chunk is not [lengths, messages]")
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(raw[at:])
        lengths += unpacker.unpack()
        length, at = _array(raw, at + unpacker.tell())
        bodies.append(raw[at:])
        count += length
    body = msgpack.packb(lengths) + _array_header(count) + b"".join(bodies)
    return zlib.compress(_array_header(2) + body, LEVEL)


def merge_lists(older: bytes, newer: bytes) -> bytes:
    """Two list chunks (``[order, kept, replies]``: ids) as one."""
    return _pack([x + y for x, y in zip(_unpack(older), _unpack(newer), strict=True)])


class ChunkUnreadable(ValueError):
    """A chunk the state carries (decoded from a stored snapshot) does not decode."""


def tiered(chunks: list[bytes], merge: Callable[[bytes, bytes], bytes]) -> list[bytes]:
    """``chunks`` after a new last one, merged as a binary counter's digits carry: while
    the chunk before the last is no larger than it (in bytes), or there are more than
    :data:`MAX_CHUNKS`, the two become one. Sizes then fall from the oldest chunk to the
    newest, so a state keeps O(log n) chunks and an item is merged O(log n) times in
    its life (repacking all of them every few snapshots cost O(n) each time). Raises
    :class:`ChunkUnreadable`."""
    while len(chunks) > 1 and (len(chunks[-2]) <= len(chunks[-1]) or len(chunks) > MAX_CHUNKS):
        try:
            merged = merge(chunks[-2], chunks[-1])
        except Exception as exc:  # zlib.error, msgpack's errors, a wrong shape
            raise ChunkUnreadable(f"{type(exc).__name__}: {exc}") from exc
        chunks = [*chunks[:-2], merged]
    return chunks


def encode(derived: Derived) -> bytes:
    """The snapshot of ``derived`` (raises :class:`Unencodable`, and
    :class:`ChunkUnreadable` for a chunk it carries that does not decode). Updates the state's
    chunk memo (``chunks``, ``chunked``, ``appended``, ``hchunks``, ``hchunked``,
    ``rchunks``, ``rchunked``, ``memo_bytes``); a state decoded from a snapshot stays lazy
    (what was added since is in a chunk now, like the rest).

    What it packs is what came since the state's last snapshot (its new items, the ids
    its lists gained, the new renderings), plus the small head: O(what is new), and the
    chunks' merges (:func:`tiered`)."""
    if derived.lazy or not derived.chunks:
        new = list(derived.items)  # lazy: ``items`` holds only what was added since
    else:
        new = [k for k in derived.items if k in derived.appended]
    if new or not derived.chunks:
        items, sizes = derived.items, derived.sizes
        chunk = _pack([[k, items[k], sizes[k]] for k in new])
        derived.chunks = tiered([*derived.chunks, chunk], merge_items)
        derived.chunked += len(new)
    derived.appended = set()
    # ``order``, ``kept`` and ``replies`` only grow between two snapshots (anything else
    # drops the memo: ``Derived.forget_chunks``), so their new tails are a chunk.
    at_order, at_kept, at_replies = derived.hchunked
    lists = (len(derived.order), len(derived.kept), len(derived.replies))
    if lists != derived.hchunked or not derived.hchunks:
        tail = [
            derived.order[at_order:],
            derived.kept[at_kept:],
            list(islice(derived.replies.items(), at_replies, None)),
        ]
        derived.hchunks = tiered([*derived.hchunks, _pack(tail)], merge_lists)
        derived.hchunked = lists
    messages = derived.joined()
    if len(derived.kept) > derived.rchunked or not derived.rchunks:
        # Lazy, the first ``rchunked`` kept messages' renderings are only in ``messages``
        # (``lengths`` each); the rest are in ``rendered``, as all are when not lazy.
        new_lengths = [len(derived.rendered[i]) for i in derived.kept[derived.rchunked :]]
        at = derived.rmessages
        rchunk = _pack([new_lengths, messages[at : at + sum(new_lengths)]])
        derived.rchunks = tiered([*derived.rchunks, rchunk], merge_rendered)
        derived.rchunked = len(derived.kept)
        derived.rmessages = at + sum(new_lengths)
        if derived.lazy:
            derived.lengths = [*(derived.lengths or ()), *new_lengths]
    derived.memo_bytes = chunk_bytes(derived.chunks, derived.hchunks, derived.rchunks)
    head = _pack(
        [
            derived.start,
            derived.through,
            derived.last_id,
            derived.blocks,
            derived.blocks_bytes,
            derived.nbytes,
            derived.chunked,
            list(derived.tool_tokens.items()),
        ]
    )
    if derived.lazy:  # in a chunk and in ``messages`` now, like the rest
        derived.items, derived.sizes, derived.rendered = {}, {}, {}
    body = msgpack.packb(
        [
            derived.session_id,
            derived.seq,
            derived.hash,
            head,
            derived.hchunks,
            derived.rchunks,
            derived.chunks,
        ],
        use_bin_type=True,
    )
    return _PREFIX.pack(MAGIC, zlib.crc32(body)) + body


def decode(
    blob: bytes, *, session_id: str, seq: int, hash: str, version: int
) -> dict[str, Any] | None:
    """The fields of the :class:`Derived` that ``blob`` holds (its items still in
    chunks), or None when it is not a snapshot of this version, of this session, as
    of this ``(seq, hash)``, intact."""
    try:
        if version != VERSION or len(blob) < _PREFIX.size:
            return None
        magic, crc = _PREFIX.unpack_from(blob)
        body = memoryview(blob)[_PREFIX.size :]
        if magic != MAGIC or zlib.crc32(body) != crc:
            return None
        owner, at, digest, head, hchunks, rchunks, chunks = msgpack.unpackb(body, raw=False)
        if (owner, at, digest) != (session_id, seq, hash):
            return None
        if not all(isinstance(c, bytes) for c in [*hchunks, *rchunks, *chunks]):
            return None
        (start, through, last_id, blocks, blocks_bytes, nbytes,
         chunked, tool_tokens) = _unpack(head)  # fmt: skip
        order: list[str] = []
        kept: list[str] = []
        pairs: list[list[str]] = []
        for hchunk in hchunks:
            more_order, more_kept, more_pairs = _unpack(hchunk)
            order += more_order
            kept += more_kept
            pairs += more_pairs
        replies, tool_tokens = dict(pairs), dict(tool_tokens)  # lists of pairs
        lengths: list[int] = []
        messages: list[dict[str, Any]] = []
        for rchunk in rchunks:
            more_lengths, more = _unpack(rchunk)
            lengths += more_lengths
            messages += more
        if len(lengths) != len(kept) or sum(lengths) != len(messages):
            return None
    except Exception:
        logger.warning("session %s: an unreadable context snapshot was ignored", session_id)
        return None
    return {
        "seq": seq,
        "hash": hash,
        "start": start,
        "through": through,
        "items": {},
        "last_id": last_id,
        "order": order,
        "kept": kept,
        "replies": replies,
        "rendered": {},
        "blocks": blocks,
        "messages": messages,
        "tail_start": len(messages) - lengths[-1] if lengths else 0,
        "dirty": False,
        "lengths": lengths,
        "blocks_bytes": blocks_bytes,
        "nbytes": nbytes,
        "tool_tokens": tool_tokens,
        "chunks": chunks,
        "chunked": chunked,
        "hchunks": hchunks,
        "hchunked": (len(order), len(kept), len(replies)),
        "rchunks": rchunks,
        "rchunked": len(kept),
        "rmessages": len(messages),
        "memo_bytes": chunk_bytes(chunks, hchunks, rchunks),
        "lazy": True,
        "snapshot_seq": seq,
    }
