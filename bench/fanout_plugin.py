"""A provider for bench/fanout.py: ``bench/clock`` streams timestamped deltas.

The prompt is ``"<count> <rate>"``; the reply is ``count`` text deltas, ``rate``
per second, each delta the UNIX time it was produced (``"1700000000.123456 "``),
so a client can measure publish-to-receipt latency on the same machine.
Loaded into the server with ``FORGE_PLUGINS=fanout_plugin`` (bench/ on PYTHONPATH).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from forge import providers
from forge.providers import events as ev


class ClockProvider:
    name = "bench"

    async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
        yield ev.StartStep()
        count, rate = [*request.messages[-1]["content"].split(), "100", "100"][:2]
        interval = 1 / float(rate)
        yield ev.TextStart("t")
        started = time.monotonic()
        for n in range(int(count)):
            delay = started + n * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            yield ev.TextDelta("t", f"{time.time():.6f} ")
        yield ev.TextEnd("t")
        yield ev.FinishStep("stop", ev.Usage(input=2, output=int(count)))


providers.register("bench", lambda model: ClockProvider())
