"""The text so far of every part still streaming, for ``part.snapshot`` frames.

Deltas never reach the log. This is what a client that (re)connects in the
middle of a reply is given to catch up, and what finalizes a reply that was
aborted or whose process died.

* :data:`buffer`, in the process running the turn, is authoritative for it;
* with ``REDIS_URL`` set, every part is mirrored in Redis (:class:`RedisMirror`),
  each window of deltas (``forge.runtime.deltas``) appended *before* it is
  published, so a snapshot read by any process covers every delta a
  subscriber could have missed, and a crashed
  runner's streamed text survives it (keys expire after a day).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any, cast

from django.conf import settings

logger = logging.getLogger(__name__)


@dataclass
class Streaming:
    session_id: str
    message_id: str
    part_id: str
    field: str
    chunks: list[str] = dataclasses.field(default_factory=list)
    length: int = 0

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""

    def as_snapshot(self) -> dict[str, str]:
        return {
            "session_id": self.session_id,
            "message_id": self.message_id,
            "part_id": self.part_id,
            "field": self.field,
            "text": self.text,
        }


class InflightBuffer:
    """The parts this process is streaming."""

    def __init__(self) -> None:
        self._parts: dict[str, Streaming] = {}

    def open(self, *, session_id: str, message_id: str, part_id: str, field: str = "text") -> None:
        self._parts[part_id] = Streaming(session_id, message_id, part_id, field)

    def append(self, part_id: str, delta: str) -> int:
        """Add a delta; return the offset it starts at."""
        part = self._parts[part_id]
        offset = part.length
        part.chunks.append(delta)
        part.length += len(delta)
        return offset

    def text(self, part_id: str) -> str:
        part = self._parts.get(part_id)
        return part.text if part else ""

    def streaming(self, part_id: str) -> Streaming | None:
        return self._parts.get(part_id)

    def close(self, part_id: str) -> None:
        self._parts.pop(part_id, None)

    def snapshot(self, session_id: str) -> list[dict[str, str]]:
        """``part.snapshot`` payloads for the session's streaming parts, oldest first."""
        return [
            p.as_snapshot()
            for p in sorted(self._parts.values(), key=lambda p: p.part_id)
            if p.session_id == session_id
        ]


buffer = InflightBuffer()


# --- the Redis mirror ---------------------------------------------------------------


def _meta(part: Streaming) -> str:
    """A part's metadata in the mirror's hash (what :meth:`RedisMirror.open` writes)."""
    return json.dumps({"message_id": part.message_id, "field": part.field})


TTL_SECONDS = 24 * 3600


_WARN_EVERY = 60.0
_last_warning = 0.0


def _unreachable(exc: BaseException, doing: str) -> None:
    """The mirror is a copy for snapshots and crash recovery: when Redis is away, a reply
    streams on without it (logged at most once a minute), and a reader gets nothing."""
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= _WARN_EVERY:
        _last_warning = now
        logger.warning("in-flight mirror unreachable while %s: %s", doing, type(exc).__name__)


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError, OSError)


_SIZES_MAX = 10_000  # parts whose mirrored length one process keeps

# A mirror command not answered within this many seconds fails (a frozen or partitioned
# Redis answers never: the turn waited on it for the whole outage, its session busy).
TIMEOUT = 1.0
# After a failure the mirror is not asked for this many seconds: a turn streams on at
# its own pace, and the parts it appended to meanwhile are restored from this process's
# buffer once Redis answers again (``RedisMirror.append_many``).
PAUSE_AFTER_FAILURE = 5.0


class RedisMirror:
    """Streaming parts in Redis: a hash of part metadata per session, a string per text.

    Every method degrades instead of failing when Redis cannot be reached.
    """

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        # The length in bytes each part's text key must have once this process's appends
        # are in (:meth:`append_many`): an APPEND answering less found the key gone.
        self._sizes: dict[str, int] = {}
        # Parts whose appends failed or were skipped: restored whole at their next one.
        self._stale: set[str] = set()
        self._paused_until = 0.0  # not asked until then (monotonic), after a failure

    def _paused(self) -> bool:
        return time.monotonic() < self._paused_until

    def _failed(self, exc: BaseException, doing: str) -> None:
        self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
        _unreachable(exc, doing)

    def try_again(self) -> None:
        """Ask Redis at the next call whatever failed before (tests)."""
        self._paused_until = 0.0

    def _parts_key(self, session_id: str) -> str:
        return f"{self.prefix}:inflight:{session_id}"

    def _text_key(self, part_id: str) -> str:
        return f"{self.prefix}:inflight-text:{part_id}"

    def _client(self) -> Any:
        import redis.asyncio as aioredis

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = aioredis.Redis.from_url(
                self.url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
            )
        return client

    async def open(self, *, session_id: str, message_id: str, part_id: str, field: str) -> None:
        meta = json.dumps({"message_id": message_id, "field": field})  # as _meta
        if self._paused():
            self._stale.add(part_id)  # (its metadata is written with its next append)
            return
        try:
            async with self._client().pipeline(transaction=True) as pipe:
                pipe.hset(self._parts_key(session_id), part_id, meta)
                pipe.expire(self._parts_key(session_id), TTL_SECONDS)
                pipe.set(self._text_key(part_id), "", ex=TTL_SECONDS)
                await pipe.execute()
        except _redis_errors() as exc:
            self._stale.add(part_id)
            self._failed(exc, "opening a part")

    async def append(self, part_id: str, delta: str) -> None:
        if self._paused():
            self._stale.add(part_id)
            return
        try:
            await self._client().append(self._text_key(part_id), delta)
        except _redis_errors() as exc:
            self._stale.add(part_id)
            self._failed(exc, "appending a delta")

    async def append_many(
        self, texts: dict[str, str], starts: dict[str, int] | None = None
    ) -> None:
        """Append to several parts' texts at once (a window of deltas): one round trip.

        ``starts``: where each text starts in its part (the buffer's offsets). A part
        whose mirror is gone (Redis restarted, or was flushed, while the part streamed:
        its metadata's ``HSETNX`` creates it again) gets its text so far back from this
        process's :data:`buffer`, so that snapshots read elsewhere cover it again (they
        found nothing, and a client that missed a delta then got no more until the
        part ended). So does a part whose text key alone was lost (evicted: the keys
        have a TTL): its APPEND answers a length short of what this process appended,
        and it would otherwise hold only the text since, which snapshots served as the
        part's text and recovery stored as the reply (a fourth-round finding)."""
        if not texts:
            return
        if self._paused():
            self._stale.update(texts)
            return
        starts = starts or {}
        if len(self._sizes) > _SIZES_MAX:  # parts that ended without a close: forget them
            self._sizes.clear()  # (a part then checked against 0 is restored, harmlessly)
        try:
            async with self._client().pipeline(transaction=False) as pipe:
                checked: list[Streaming | None] = []  # per text, the part whose mirror to check
                for part_id, text in texts.items():
                    pipe.append(self._text_key(part_id), text)
                    streaming = buffer.streaming(part_id) if part_id in starts else None
                    if streaming is not None:
                        key = self._parts_key(streaming.session_id)
                        pipe.hsetnx(key, part_id, _meta(streaming))
                    checked.append(streaming)
                results = iter(await pipe.execute())
            lost: list[tuple[str, Streaming]] = []
            for part_id, streaming in zip(texts, checked, strict=True):
                length = int(next(results))  # the APPEND's new length, in bytes
                if streaming is None:
                    continue
                expected = self._sizes.get(part_id, 0) + len(texts[part_id].encode())
                self._sizes[part_id] = expected
                # metadata gone (the text too), or the text alone, or appends missed
                if next(results) or length != expected or part_id in self._stale:
                    lost.append((part_id, streaming))
                self._stale.discard(part_id)
            if lost:
                await self._restore(lost, texts, starts)
        except _redis_errors() as exc:
            self._stale.update(texts)
            self._failed(exc, "appending deltas")

    async def _restore(
        self, lost: list[tuple[str, Streaming]], texts: dict[str, str], starts: dict[str, int]
    ) -> None:
        logger.warning(
            "the in-flight mirror of %d streaming parts was gone (Redis restarted?); "
            "restored from this process's buffer",
            len(lost),
        )
        async with self._client().pipeline(transaction=True) as pipe:
            for part_id, streaming in lost:
                end = starts[part_id] + len(texts[part_id])  # what is mirrored once this is in
                text = streaming.text[:end]
                self._sizes[part_id] = len(text.encode())
                pipe.set(self._text_key(part_id), text, ex=TTL_SECONDS)
                pipe.expire(self._parts_key(streaming.session_id), TTL_SECONDS)
            await pipe.execute()

    async def close(self, *, session_id: str, part_id: str) -> None:
        self._sizes.pop(part_id, None)
        self._stale.discard(part_id)
        if self._paused():
            return  # (its keys expire: ``TTL_SECONDS``)
        try:
            async with self._client().pipeline(transaction=True) as pipe:
                pipe.hdel(self._parts_key(session_id), part_id)
                pipe.delete(self._text_key(part_id))
                await pipe.execute()
        except _redis_errors() as exc:
            self._failed(exc, "closing a part")

    async def snapshot(self, session_id: str) -> list[dict[str, str]]:
        if self._paused():
            return []
        try:
            return await self._snapshot(session_id)
        except _redis_errors() as exc:
            self._failed(exc, "reading snapshots")
            return []

    async def _snapshot(self, session_id: str) -> list[dict[str, str]]:
        client = self._client()
        raw: dict[bytes, bytes] = await client.hgetall(self._parts_key(session_id))
        if not raw:
            return []
        meta = {key.decode(): json.loads(value) for key, value in raw.items()}
        part_ids = sorted(meta)
        texts: list[bytes | None] = await client.mget([self._text_key(p) for p in part_ids])
        return [
            {
                "session_id": session_id,
                "message_id": meta[part_id]["message_id"],
                "part_id": part_id,
                "field": meta[part_id]["field"],
                "text": (text or b"").decode(),
            }
            for part_id, text in zip(part_ids, texts, strict=True)
        ]

    def texts_sync(self, session_id: str) -> dict[str, str]:
        """The streamed texts of the session's open parts (for crash recovery, sync); ``{}``
        when Redis cannot be reached."""
        try:
            return self._texts_sync(session_id)
        except _redis_errors() as exc:
            _unreachable(exc, "reading a dead runner's texts")
            return {}

    def _texts_sync(self, session_id: str) -> dict[str, str]:
        import redis

        client = redis.Redis.from_url(
            self.url, socket_timeout=TIMEOUT, socket_connect_timeout=TIMEOUT
        )
        try:
            keys = cast(list[bytes], client.hkeys(self._parts_key(session_id)))
            part_ids = [key.decode() for key in keys]
            if not part_ids:
                return {}
            texts = cast(list[bytes | None], client.mget([self._text_key(p) for p in part_ids]))
            client.delete(self._parts_key(session_id), *[self._text_key(p) for p in part_ids])
            return {p: (t or b"").decode() for p, t in zip(part_ids, texts, strict=True)}
        finally:
            client.close()


_mirror: RedisMirror | None = None
_mirror_url: str | None = None


def mirror() -> RedisMirror | None:
    """The Redis mirror when ``REDIS_URL`` is set (``FORGE_INFLIGHT_PREFIX`` names its keys)."""
    global _mirror, _mirror_url
    url = settings.REDIS_URL or None
    if url is None:
        return None
    if _mirror is None or _mirror_url != url:
        _mirror, _mirror_url = RedisMirror(url, settings.FORGE_INFLIGHT_PREFIX), url
    return _mirror


async def snapshots(session_id: str) -> list[dict[str, str]]:
    """The text so far of the session's streaming parts, as this process can best tell."""
    shared = mirror()
    if shared is not None:
        return await shared.snapshot(session_id)
    return buffer.snapshot(session_id)
