"""channels' in-memory channel layer, whose ``group_send`` spawns no task per member.

``channels.layers.InMemoryChannelLayer.group_send`` (4.x) wraps the send to each member
of the group in a task and waits for them through ``asyncio.as_completed``, which
builds a queue and callbacks even when the group has no member: the common case for a
reply streaming in a process no browser watches (a worker, a benchmark, an API call
with ``?wait=1``). A reply publishes some twenty frames; that machinery was ~8 % of an
in-process turn's event-loop time (``bench/peers/peer_forge.py --workload turn`` under
py-spy, issue 20).

The layer's ``send`` never suspends (``put_nowait`` on the channel's queue), so
sending to the members one after the other is the same as gathering the tasks: each
member gets its own copy, in the order the frames were sent, and a full member's
channel is skipped (``ChannelFull``) without stopping the others. Everything else
(expiry, capacity, groups, ``flush``) is channels' own.
"""

from __future__ import annotations

import contextlib
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as BaseInMemoryChannelLayer


class InMemoryChannelLayer(BaseInMemoryChannelLayer):
    """The in-memory layer of one process (``CHANNEL_LAYERS`` without ``REDIS_URL``)."""

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "Message is not a dict"
        self.require_valid_group_name(group)
        self._clean_expired()
        members = self.groups.get(group)
        if not members:
            return
        for channel in list(members):
            with contextlib.suppress(ChannelFull):  # that member misses it, as in channels
                await self.send(channel, message)
