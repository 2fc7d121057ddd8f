"""A step's stream, read one event ahead when that costs no wait (for the processor)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from forge.providers import events as ev


class ReadAhead:
    """A step's stream, read one event ahead when that costs no wait.

    A finished block is written at its end so that a process killed while the model
    goes on keeps it. When the step's ``finish-step`` is already there (the provider
    yields it right after the block's end, as most do once the model stopped), nothing
    is left to wait for: the block then rides with the step's end in one transaction
    (:meth:`step_ends_now`). Whether it is there is asked of the stream with one turn
    of the event loop, never a wait on the model: a stream that is not ready keeps
    its next event for :meth:`next`, which awaits the same fetch.
    """

    def __init__(self, stream: AsyncIterator[ev.StreamEvent]) -> None:
        self._events = aiter(stream)
        self._fetch: asyncio.Future[ev.StreamEvent] | None = None

    async def next(self) -> ev.StreamEvent | None:
        """The next event (fetched ahead or now); None once the stream ended."""
        fetch, self._fetch = self._fetch, None
        try:
            return await (fetch if fetch is not None else anext(self._events))
        except StopAsyncIteration:
            return None

    async def step_ends_now(self) -> bool:
        """Whether the next event is a ``finish-step`` the stream yields at once."""
        if self._fetch is None:
            self._fetch = asyncio.ensure_future(anext(self._events))
        await asyncio.sleep(0)  # one turn of the loop: a ready stream yields in it
        fetch = self._fetch
        if not fetch.done() or fetch.cancelled() or fetch.exception() is not None:
            return False  # its failure is raised by :meth:`next`, in order
        return isinstance(fetch.result(), ev.FinishStep)

    async def settle(self) -> None:
        """Leave no fetch running: the stream is closed next, and an async generator
        cannot be closed while it runs."""
        fetch, self._fetch = self._fetch, None
        if fetch is None:
            return
        if not fetch.done():
            fetch.cancel()
            await asyncio.wait({fetch})
        if not fetch.cancelled():
            fetch.exception()  # retrieved: an abandoned fetch's error is not "unhandled"
