"""A socket frame over the server's size limit is answered with a close code.

daphne refuses a WebSocket message or frame over ``--websocket-max-message-size`` /
``--websocket-max-frame-size`` (1 MiB by default) before any consumer sees it, so
the consumer cannot answer it with a ``too_large`` error frame. autobahn (daphne's
WebSocket protocol) then fails the connection, and with its defaults it does so by
dropping TCP: the client learns nothing of why. :func:`close_oversized_cleanly`
makes it close with 1009 ("message too big", RFC 6455) and a reason instead.

daphne's command line has no switch for this, so the factory daphne builds its
protocol from is given the option (``failByDrop=False``: every connection autobahn
fails is closed with a code, not dropped).

The limit is for what clients send. autobahn also refuses to *send* a message over
it, and Forge's frames can be larger: a reply of megabytes, a tool's output (logged
whole up to ``FORGE_TOOL_OUTPUT_MAX_BYTES``). Such a frame raised in the consumer's
send: the socket stopped forwarding and went silent, and since a replay from the
start sends the same frame, the session could never be loaded over a socket again.
The protocol therefore sends without the limit; it still applies to what it receives.
A browser takes messages of any size; a client library with a limit of its own
(Python's ``websockets``: 1 MiB unless ``max_size``) must raise it. Frames within the limit are the
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

    class WebSocketProtocol(base.protocol):
        def sendMessage(self, payload: bytes, *args: Any, **kwargs: Any) -> Any:
            # The size limit is on what a client sends; autobahn applies it to what the
            # server sends too, and raises. Forge's own frames may be larger (a reply of
            # megabytes, a tool's output up to FORGE_TOOL_OUTPUT_MAX_BYTES): refused,
            # the socket went silent, live and on every replay from the start.
            protocol: Any = self
            limit, protocol.maxMessagePayloadSize = protocol.maxMessagePayloadSize, 0
            try:
                return super().sendMessage(payload, *args, **kwargs)
            finally:
                protocol.maxMessagePayloadSize = limit

    class WebSocketFactory(base):
        closes_with_a_code = True
        protocol = WebSocketProtocol

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.setProtocolOptions(failByDrop=False)

    server.WebSocketFactory = WebSocketFactory
