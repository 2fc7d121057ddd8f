"""A streaming HTTP response that owns its stream's subscription (SSE, the AI SDK).

The view opens the subscription (:func:`open_stream`) before it answers, so a
layer that is away is a 503 and a user at the limit a 429, both as JSON, before
any byte of the stream; and the stream slot is only taken once the subscription
is open. The response then holds it until the stream ends, the client goes away,
or Django closes the response, whichever comes first; a response that the
server drops without either (a client gone while the response passed the
middleware) lets it go after ``CLAIM_WITHIN`` seconds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from django.http import StreamingHttpResponse

from . import hub

# Seconds between the view's return and the start of the response's stream, beyond
# which the server is taken to have dropped the response. The stream starts as soon
# as the middleware let the response through; this only bounds a leak.
CLAIM_WITHIN = 60.0


async def open_stream(session_id: str, *, owner: int, face: str) -> hub.Subscription:
    """The subscription (and stream slot) a :class:`SubscribedStream` will own; raises
    ``TooManyStreams`` or ``StreamUnavailable`` (see :func:`forge.realtime.hub.join`).
    ``face``: ``sse`` or ``aisdk``, the label it is counted under in the metrics."""
    return await hub.join(session_id, owner=owner, claim_within=CLAIM_WITHIN, face=face)


class SubscribedStream(StreamingHttpResponse):
    """Streams ``frames(subscriber)`` and closes ``subscription`` once: when the stream
    ends (also by the client going away) or when Django closes the response, even if
    the stream never started."""

    def __init__(
        self,
        subscription: hub.Subscription,
        frames: Callable[[hub.Subscriber], AsyncGenerator[bytes, None]],
        **kwargs: Any,
    ) -> None:
        self.subscription = subscription
        super().__init__(self._stream(frames), **kwargs)

    async def _stream(
        self, frames: Callable[[hub.Subscriber], AsyncGenerator[bytes, None]]
    ) -> AsyncIterator[bytes]:
        if not self.subscription.claim():
            return  # it waited too long and was let go: the client reconnects
        try:
            async with contextlib.aclosing(frames(self.subscription.subscriber)) as chunks:
                async for chunk in chunks:
                    yield chunk
        finally:
            await self.subscription.close()

    def close(self) -> None:
        try:
            self.subscription.close_soon()  # Django calls this from a worker thread
        finally:
            super().close()
