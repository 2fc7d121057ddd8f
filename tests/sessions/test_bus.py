"""Frames reach the session's channel-layer group (in-memory layer, then Redis), after commit."""

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import connection

from sessions import bus, services
from sessions.exceptions import InvalidPart
from sessions.models import SessionEvent

pytestmark = pytest.mark.django_db(transaction=True)


async def subscribe(session: Any) -> tuple[Any, str]:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(bus.session_group(session.pk), channel)
    return layer, channel


async def next_frame(layer: Any, channel: str) -> dict:
    message = await asyncio.wait_for(layer.receive(channel), timeout=5)
    assert message["type"] == bus.FRAME_MESSAGE_TYPE
    return message["frame"]


async def test_committed_events_reach_the_group_in_order(session):
    layer, channel = await subscribe(session)
    message = await database_sync_to_async(services.update_message)(
        session=session, info={"role": "user"}
    )
    written = [message]
    for n in range(5):
        written.append(
            await database_sync_to_async(services.update_part)(
                session=session,
                part={"message_id": message.data["id"], "type": "text", "text": f"part {n}"},
            )
        )
    frames = [await next_frame(layer, channel) for _ in written]
    assert [f["seq"] for f in frames] == [2, 3, 4, 5, 6, 7]
    for frame, event in zip(frames, written, strict=True):
        assert frame == {
            "kind": "event",
            "seq": event.seq,
            "id": event.id,
            "session_id": session.pk,
            "type": event.type,
            "at": frame["at"],
            "data": event.data,
        }


async def test_a_refused_write_publishes_nothing(session):
    layer, channel = await subscribe(session)
    with pytest.raises(InvalidPart):
        await database_sync_to_async(services.update_part)(
            session=session, part={"message_id": "msg_missing", "type": "text", "text": "x"}
        )
    await services.apublish_delta(
        session=session, message_id="m", part_id="p", field="text", offset=0, delta="marker"
    )
    frame = await next_frame(layer, channel)
    assert frame["kind"] == "delta"
    assert frame["delta"] == "marker"


async def test_deltas_go_to_the_bus_only(session):
    layer, channel = await subscribe(session)
    before = await database_sync_to_async(SessionEvent.objects.count)()
    for offset, delta in ((0, "Hel"), (3, "lo")):
        await services.apublish_delta(
            session=session,
            message_id="msg_1",
            part_id="prt_1",
            field="text",
            offset=offset,
            delta=delta,
        )
    # Deltas queued behind each other may be sent as one frame: the text and the
    # offsets are what count, not how they were cut.
    text = ""
    while text != "Hello":
        frame = await next_frame(layer, channel)
        assert (frame["type"], frame["offset"]) == ("part.delta", len(text))
        text += frame["delta"]
    assert await database_sync_to_async(SessionEvent.objects.count)() == before
    with pytest.raises(InvalidPart, match="offset"):
        await services.apublish_delta(
            session=session, message_id="m", part_id="p", field="text", offset=-1, delta="x"
        )


def prompt_from_a_plain_thread(session: Any) -> Any:
    """A user message written by a thread with no event loop (a command's write)."""
    try:
        return services.update_message(session=session, info={"role": "user"})
    finally:
        connection.close()


async def test_a_sync_caller_with_no_event_loop_publishes_too(session):
    """Management commands and plain threads publish through the bus's own loop."""
    layer, channel = await subscribe(session)

    event = await asyncio.to_thread(prompt_from_a_plain_thread, session)
    frame = await next_frame(layer, channel)
    assert (frame["seq"], frame["id"]) == (event.seq, event.id)


async def test_a_batch_from_a_plain_thread_publishes_its_frames_in_order(session, monkeypatch):
    """A batch's frames go out together after its commit; a frame the layer refuses is
    logged and the rest still go (clients repair the gap from the log)."""
    layer, channel = await subscribe(session)
    sent = layer.group_send
    refused: list[int] = []

    async def refuse_the_second(group: str, message: dict) -> None:
        if message["frame"]["seq"] == 4 and not refused:  # the batch's second (seq 1: created)
            refused.append(4)
            raise ConnectionError("the layer is away")
        await sent(group, message)

    monkeypatch.setattr(layer, "group_send", refuse_the_second)

    def write_a_batch() -> list[Any]:
        try:
            message = services.update_message(session=session, info={"role": "user"})
            return services.append_batch(
                session=session,
                writes=[
                    services.UpdatePart(
                        part={"message_id": message.data["id"], "type": "text", "text": f"t{n}"}
                    )
                    for n in range(3)
                ],
            )
        finally:
            connection.close()

    await asyncio.to_thread(write_a_batch)
    seqs = [(await next_frame(layer, channel))["seq"] for _ in range(3)]
    assert seqs == [2, 3, 5]
    assert refused == [4]


async def test_a_plain_threads_write_to_a_group_nobody_joined_spins_no_loop(session, monkeypatch):
    """The in-memory layer with no member in the session's group: sending is a no-op,
    so a command's write does not start the bus's own loop for it."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("this run's layer is Redis: every process could be listening")

    started: list[int] = []
    monkeypatch.setattr(bus, "_own_loop", lambda: started.append(1))  # a failure is logged

    event = await asyncio.to_thread(prompt_from_a_plain_thread, session)
    assert event.seq == 2
    assert started == []


async def test_frames_for_a_group_nobody_joined_go_nowhere_and_a_member_gets_the_next(
    session, monkeypatch
):
    """The in-memory layer with no member in the session's group: a frame from the loop
    (a delta, a status) or from a thread working for it (an event, after its commit) is
    dropped at once, as the layer would drop it, without the outbox, its drain task or
    a thread wake-up. A member that joins gets every frame from then on, in order."""
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("this run's layer is Redis: every process could be listening")
    queued: list[dict] = []
    put = bus._LoopPublisher.put

    def recording_put(self: Any, group: str, frame: dict) -> None:
        queued.append(frame)
        put(self, group, frame)

    monkeypatch.setattr(bus._LoopPublisher, "put", recording_put)

    await services.apublish_status(session_id=session.pk, status="busy")
    await database_sync_to_async(services.update_message)(session=session, info={"role": "user"})
    assert queued == []

    layer, channel = await subscribe(session)
    await services.apublish_status(session_id=session.pk, status="idle")
    message = await database_sync_to_async(services.update_message)(
        session=session, info={"role": "user"}
    )
    assert (await next_frame(layer, channel))["status"] == "idle"
    assert (await next_frame(layer, channel))["seq"] == message.seq == 3
    assert [f["kind"] for f in queued] == ["status", "event"]
