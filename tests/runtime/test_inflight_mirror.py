"""The in-flight mirror in Redis heals itself when its keys are gone mid-part.

A third-round finding (the cluster, both Redis shards killed and restarted while a reply
streamed): the mirror's keys were gone, so the snapshots other processes read to repair
a client's gap found nothing, and a client that had missed a delta got no more text
until the part ended. The runner still has the whole text in its buffer: the next
window of deltas puts it back.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from forge.runtime.inflight import buffer, mirror

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def shared():
    if not settings.REDIS_URL:
        pytest.skip("the embedded stack has no Redis, so no mirror")
    return mirror()


async def test_a_part_whose_mirror_was_lost_gets_its_text_back(shared):
    session_id, message_id, part_id = "ses_mirror", "msg_mirror", "prt_mirror_lost"
    buffer.open(session_id=session_id, message_id=message_id, part_id=part_id)
    await shared.open(session_id=session_id, message_id=message_id, part_id=part_id, field="text")
    try:
        first = "Hello, "
        buffer.append(part_id, first)
        await shared.append_many({part_id: first}, {part_id: 0})
        assert [s["text"] for s in await shared.snapshot(session_id)] == [first]

        # Redis restarts: the part's keys are gone; meanwhile more text streamed
        client = shared._client()
        await client.delete(shared._parts_key(session_id), shared._text_key(part_id))
        assert await shared.snapshot(session_id) == []
        second, third = "wor", "ld"
        buffer.append(part_id, second)
        offset = buffer.append(part_id, third)  # in the buffer, not yet in a window

        await shared.append_many({part_id: second}, {part_id: len(first)})
        (snapshot,) = await shared.snapshot(session_id)
        assert (snapshot["message_id"], snapshot["field"]) == (message_id, "text")
        assert snapshot["text"] == first + second  # what was published, no more
        assert await client.ttl(shared._parts_key(session_id)) > 0

        await shared.append_many({part_id: third}, {part_id: offset})
        (snapshot,) = await shared.snapshot(session_id)
        assert snapshot["text"] == first + second + third  # appended once
    finally:
        buffer.close(part_id)
        await shared.close(session_id=session_id, part_id=part_id)


async def test_a_part_whose_text_key_alone_was_lost_gets_its_text_back(shared):
    """A fourth-round finding: with the part's metadata still there, the lost text key
    was created again by the next APPEND holding only the text since: snapshots served
    that tail as the part's text, and a crash then stored it as the reply."""
    session_id, message_id, part_id = "ses_mirror3", "msg_mirror3", "prt_mirror_text"
    buffer.open(session_id=session_id, message_id=message_id, part_id=part_id)
    await shared.open(session_id=session_id, message_id=message_id, part_id=part_id, field="text")
    try:
        first, second = "Hello, 世界 👨‍👩‍👧 ", "and the rest"
        buffer.append(part_id, first)
        await shared.append_many({part_id: first}, {part_id: 0})
        await shared._client().delete(shared._text_key(part_id))  # evicted, say
        buffer.append(part_id, second)
        await shared.append_many({part_id: second}, {part_id: len(first)})
        (snapshot,) = await shared.snapshot(session_id)
        assert snapshot["text"] == first + second
    finally:
        buffer.close(part_id)
        await shared.close(session_id=session_id, part_id=part_id)


async def test_a_part_that_never_reached_the_mirror_is_put_there(shared):
    """Redis was away when the part opened: the first window puts it there."""
    session_id, message_id, part_id = "ses_mirror2", "msg_mirror2", "prt_mirror_late"
    buffer.open(session_id=session_id, message_id=message_id, part_id=part_id, field="reasoning")
    try:
        buffer.append(part_id, "thinking")
        await shared.append_many({part_id: "thinking"}, {part_id: 0})
        (snapshot,) = await shared.snapshot(session_id)
        assert (snapshot["field"], snapshot["text"]) == ("reasoning", "thinking")
    finally:
        buffer.close(part_id)
        await shared.close(session_id=session_id, part_id=part_id)
