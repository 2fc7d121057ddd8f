"""A socket frame over the server's size limit is answered with a close code.

daphne refuses a WebSocket message or frame over ``--websocket-max-message-size`` /
``--websocket-max-frame-size`` (1 MiB by default) before any consumer sees it, so
the consumer cannot answer it with a ``too_large`` error frame. autobahn (daphne's
WebSocket protocol) then fails the connection, and with its defaults it does so by
dropping TCP: the client learns nothing of why. :func:`close_oversized_cleanly`
makes it close with 1009 ("message too big", RFC 6455) and a reason instead.

daphne's command line has no switch for this, so the factory daphne builds its
protocol from is given the option (``failByDrop=False``: every connection autobahn
fails is closed with a code, not dropped). Frames within the limit are the
consumer's: its own ``MAX_FRAME_BYTES`` check gives ``too_large`` error frames
under servers without such a limit.
"""

from __future__ import annotations

import sys
from typing import Any


def close_oversized_cleanly() -> None:
    """When daphne is the server (its module is loaded before the application), make the
    WebSocket factory it is about to build close failed connections with a code."""
    server: Any = sys.modules.get("daphne.server")
    if server is None or getattr(server.WebSocketFactory, "closes_with_a_code", False):
        return
    base: Any = server.WebSocketFactory

    class WebSocketFactory(base):
        closes_with_a_code = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.setProtocolOptions(failByDrop=False)

    server.WebSocketFactory = WebSocketFactory
