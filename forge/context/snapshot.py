"""The snapshot format: a :class:`forge.context.derived.Derived` as bytes, and back.

A snapshot lets a process that never served a session (after a deploy, on another
daphne, past the cache's capacity) load its next model input from one row instead
of folding the whole log: it decodes the snapshot and folds only the events after
it. ``sessions.snapshots`` stores the bytes; this module encodes and checks them.

Format (:data:`VERSION` 3)::

    MAGIC (4 bytes: b"FCS" + version) | crc32 of the body (4 bytes, big-endian) | body
    body = msgpack [session id, seq, hash, head, [rendered chunk, ...], [chunk, ...]]
    head = zlib(msgpack [start, through, last_id, order, kept, replies, blocks,
                         blocks_bytes, nbytes, items in chunks, tool_tokens])
    replies = [[parent id, reply id], ...]; tool_tokens = [[message id, tokens], ...]
    rendered chunk = zlib(msgpack [lengths, messages])
    chunk = zlib(msgpack [[message id, {info, parts}, sizes], ...])

Nothing is a map keyed by message ids: msgpack interns every map key it decodes
(``sys.intern``), and interned ids would grow the interpreter's table of interned
strings with the sessions a process loads (a table never shrinks).

The head and the rendered chunks are what a request needs, decoded at load: the
ids in order, the blocks, and the kept messages' renderings, joined (in kept
order; ``lengths``: how many model messages each kept message renders to). The
read history's items (every message's info and parts, and their ``sizes``) are in
chunks, decoded only when the fold,
:meth:`Derived.history` or a moved rolled cut first needs an old item: a cold
request never decodes them, and neither does folding the next turn onto it.
Both kinds of chunk are also the encoder's memo: a state keeps the chunks it last
encoded (compressed, a few % of the state) and the next snapshot packs only the
items and renderings added since, as one more chunk of each, until a change to an
old item or a moved rolled cut drops them or :data:`MAX_CHUNKS` folds them into one.

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
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from .derived import Derived

logger = logging.getLogger(__name__)

# 2: the head holds ``tool_tokens``; 3: ``sizes`` and ``nbytes`` count the request's
# length memos (``sizing.MEMO_PER_MODEL_MESSAGE``, ``MESSAGE_OVERHEAD``: a state
# decoded from version 2 would keep a lower estimate than its seed), and the maps keyed
# by message ids are lists of pairs.
VERSION = 3
MAGIC = b"FCS" + bytes([VERSION])
LEVEL = 1  # zlib: the fastest level; the text compresses ~10x at it already
MAX_CHUNKS = 8  # more, and the next snapshot repacks the items as one chunk
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


def encode(derived: Derived) -> bytes:
    """The snapshot of ``derived`` (raises :class:`Unencodable`). Updates the state's
    chunk memo (``chunks``, ``chunked``, ``appended``, ``memo_bytes``); a state decoded
    from a snapshot stays lazy (what was added since is in a chunk now, like the rest)."""
    if max(len(derived.chunks), len(derived.rchunks)) >= MAX_CHUNKS:
        derived.unpack()
        derived.forget_chunks()
    if derived.lazy or not derived.chunks:
        new = list(derived.items)  # lazy: ``items`` holds only what was added since
    else:
        new = [k for k in derived.items if k in derived.appended]
    if new or not derived.chunks:
        items, sizes = derived.items, derived.sizes
        chunk = _pack([[k, items[k], sizes[k]] for k in new])
        derived.chunks = [*derived.chunks, chunk]
        derived.chunked += len(new)
    derived.appended = set()
    messages = derived.joined()
    lengths = derived.render_lengths()
    if len(derived.kept) > derived.rchunked or not derived.rchunks:
        at = sum(lengths[: derived.rchunked])
        new_lengths = lengths[derived.rchunked :]
        rchunk = _pack([new_lengths, messages[at : at + sum(new_lengths)]])
        derived.rchunks = [*derived.rchunks, rchunk]
        derived.rchunked = len(derived.kept)
    derived.memo_bytes = chunk_bytes(derived.chunks, derived.rchunks)
    head = _pack(
        [
            derived.start,
            derived.through,
            derived.last_id,
            derived.order,
            derived.kept,
            list(derived.replies.items()),
            derived.blocks,
            derived.blocks_bytes,
            derived.nbytes,
            derived.chunked,
            list(derived.tool_tokens.items()),
        ]
    )
    if derived.lazy:  # in a chunk and in ``messages`` now, like the rest
        derived.items, derived.sizes, derived.rendered = {}, {}, {}
        derived.lengths = lengths
    body = msgpack.packb(
        [derived.session_id, derived.seq, derived.hash, head, derived.rchunks, derived.chunks],
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
        owner, at, digest, head, rchunks, chunks = msgpack.unpackb(body, raw=False)
        if (owner, at, digest) != (session_id, seq, hash):
            return None
        if not all(isinstance(c, bytes) for c in [*rchunks, *chunks]):
            return None
        (start, through, last_id, order, kept, replies, blocks,
         blocks_bytes, nbytes, chunked, tool_tokens) = _unpack(head)  # fmt: skip
        replies, tool_tokens = dict(replies), dict(tool_tokens)  # lists of pairs
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
        "rchunks": rchunks,
        "rchunked": len(kept),
        "memo_bytes": chunk_bytes(chunks, rchunks),
        "lazy": True,
        "snapshot_seq": seq,
    }
