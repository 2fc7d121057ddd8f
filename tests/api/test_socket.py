"""The session socket (CONTRACT §4), through the real ASGI application: origin check,
cookie/token auth, replay + snapshots + live frames, client frames, bad input."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from forge.asgi import application
from forge.runtime import inflight, lease
from sessions import services
from tests.frames import Text
from tests.replies import paced, words

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

ORIGIN = (b"origin", b"http://testserver")


def socket(
    session_id: str, token: str | None, *, after: int | None = None, origin: bool = True
) -> WebsocketCommunicator:
    headers = [ORIGIN] if origin else []
    if token is not None:
        headers.append((b"authorization", f"Token {token}".encode()))
    path = f"/ws/sessions/{session_id}/" + (f"?after={after}" if after is not None else "")
    return WebsocketCommunicator(application, path, headers=headers)


async def frames_until(
    ws: WebsocketCommunicator, done: Any, timeout: float = 20
) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while not done(frames):
            # receive_from's own default (1 s) is too short under CI load: the deadline
            # is this helper's.
            frames.append(json.loads(await ws.receive_from(timeout=timeout)))
    return frames


async def backlog(ws: WebsocketCommunicator) -> list[dict[str, Any]]:
    """What a socket sends on connect: the log after ``after``, snapshots of streaming
    parts, and last the session's status (``session.status``)."""
    return await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "status")


async def until_ack(ws: WebsocketCommunicator) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ack of a prompt just sent, and the frames that came before it."""
    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "ack")
    return frames[-1], frames[:-1]


def finished(message_id: str) -> Any:
    def check(frames: list[dict[str, Any]]) -> bool:
        return any(
            f.get("type") == "message.updated"
            and f["data"]["id"] == message_id
            and f["data"].get("completed_at")
            for f in frames
        )

    return check


async def test_unauthenticated_sockets_close_4401(session):
    for token in (None, "not-a-token"):
        ws = socket(session.pk, token)
        connected, _ = await ws.connect(timeout=10)
        assert connected
        assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4401}
        await ws.disconnect()


async def test_a_token_in_the_query_string_is_not_accepted(session, token):
    ws = WebsocketCommunicator(
        application, f"/ws/sessions/{session.pk}/?token={token}", headers=[ORIGIN]
    )
    await ws.connect(timeout=10)
    assert (await ws.receive_output(timeout=5))["code"] == 4401
    await ws.disconnect()


@pytest.mark.parametrize("after", ["-1", "x", "%C2%B2", "9" * 40])
async def test_a_bad_after_gets_an_error_frame_and_closes_4400(session, token, after):
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/?after={after}",
        headers=[ORIGIN, (b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await ws.connect(timeout=10)
    assert connected
    frame = await ws.receive_json_from(timeout=5)
    assert (frame["kind"], frame["code"]) == ("error", "invalid_cursor")
    assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4400}


async def test_an_after_past_the_head_gets_an_error_frame_and_closes_4400(
    session, token, user_message
):
    """Accepted, such a socket would take every event up to ``after`` as sent already and
    never pass on the next ones (issue 17). At the head it is a socket like any other."""
    past = socket(session.pk, token, after=3)  # the log holds 2 events
    assert (await past.connect())[0]
    frame = await past.receive_json_from(timeout=5)
    assert (frame["kind"], frame["code"]) == ("error", "invalid_cursor")
    assert "past" in frame["message"]
    assert (await past.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4400}
    at_head = socket(session.pk, token, after=2)
    assert (await at_head.connect())[0]
    await database_sync_to_async(services.update_message)(session=session, info={"role": "user"})
    frame = await at_head.receive_json_from(timeout=5)
    assert (frame["kind"], frame["seq"]) == ("event", 3)
    await at_head.disconnect()


async def test_another_tenants_session_and_unknown_ids_close_4404(session, stranger_token, token):
    for session_id, who in (
        (session.pk, stranger_token),
        ("ses_missing", token),
        ("bad id!", token),
    ):
        ws = socket(session_id, who)
        await ws.connect(timeout=10)
        assert (await ws.receive_output(timeout=5))["code"] == 4404
        await ws.disconnect()


async def test_a_foreign_origin_is_refused(session, token):
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[
            (b"origin", b"http://evil.example"),
            (b"authorization", f"Token {token}".encode()),
        ],
    )
    connected, _ = await ws.connect(timeout=10)
    assert not connected
    await ws.disconnect()


@pytest.mark.parametrize(
    ("host", "origin", "trusted", "accepted"),
    [
        (b"testserver:8000", b"http://testserver:8000", [], True),
        (b"testserver:8000", b"http://testserver:9999", [], False),  # another app, same host
        (b"testserver:8000", b"http://testserver", [], False),  # port 80
        (b"testserver:443", b"https://testserver", [], True),  # https's default port
        # a Host without a port (a proxy on 80 or 443): the Origin's default port only
        # (a third-round finding: any port was let in)
        (b"testserver", b"http://testserver:9999", [], False),
        (b"testserver", b"https://testserver:8443", [], False),
        (b"testserver", b"https://testserver", [], True),
        (b"testserver", b"http://testserver", [], True),
        (b"testserver", b"http://testserver:80", [], True),
        (b"testserver:8000", b"http://testserver:3000", ["http://testserver:3000"], True),
        (b"[::1]:8000", b"http://[::1]:9999", [], False),
        (b"testserver:8000", b"http://testserver:99999", [], False),  # not a port
    ],
)
async def test_an_origin_on_another_port_is_refused(
    session, token, settings, host, origin, trusted, accepted
):
    """A second-round finding: the Origin's host alone was compared with ALLOWED_HOSTS,
    so a page of another application on the same host and another port opened sockets
    with the user's cookie. The port must be the one the handshake reached, unless the
    origin is trusted (CSRF_TRUSTED_ORIGINS)."""
    settings.ALLOWED_HOSTS = ["testserver", "[::1]"]
    settings.CSRF_TRUSTED_ORIGINS = trusted
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[
            (b"host", host),
            (b"origin", origin),
            (b"authorization", f"Token {token}".encode()),
        ],
    )
    connected, _ = await ws.connect(timeout=10)
    assert connected is accepted
    await ws.disconnect()


@pytest.mark.parametrize(
    ("forwarded", "origin", "accepted"),
    [
        (b"https", b"https://testserver", True),
        (b"https", b"http://testserver", False),  # a plain-http page, the Secure cookie
        (b"http", b"https://testserver", False),
        (b"http", b"http://testserver", True),
    ],
)
async def test_behind_a_tls_proxy_the_origin_s_scheme_must_agree(
    session, token, settings, forwarded, origin, accepted
):
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    ws = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[
            (b"host", b"testserver"),
            (b"x-forwarded-proto", forwarded),
            (b"origin", origin),
            (b"authorization", f"Token {token}".encode()),
        ],
    )
    connected, _ = await ws.connect(timeout=10)
    assert connected is accepted
    await ws.disconnect()


async def test_on_connect_the_log_after_the_seq_is_replayed_in_order(session, token, user_message):
    for n in range(5):
        await database_sync_to_async(services.update_part)(
            session=session, part={"message_id": user_message["id"], "type": "text", "text": str(n)}
        )
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=10))[0]
    frames = await backlog(ws)
    assert [f["seq"] for f in frames[:-1]] == list(range(1, 8))
    assert all(f["kind"] == "event" for f in frames[:-1])
    assert frames[-1]["status"] == "idle"
    await ws.disconnect()
    later = socket(session.pk, token, after=5)
    await later.connect()
    frames = await backlog(later)
    assert [f["seq"] for f in frames[:-1]] == [6, 7]
    assert await later.receive_nothing(timeout=0.2)
    await later.disconnect()


async def test_on_connect_the_sessions_status_follows_the_backlog(session, token, user_message):
    """A client that (re)connects is told whether a turn runs now (CONTRACT §4: backlog,
    then one ``session.status``, then live frames): it used to learn it only at the next
    change, so a page opened mid-reply showed an idle session until the reply ended."""
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=10))[0]
    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "status")
    assert [f["kind"] for f in frames] == ["event", "event", "status"]
    assert frames[-1] == {
        "kind": "status",
        "type": "session.status",
        "session_id": session.pk,
        "status": "idle",
        "attempt": None,
        "next_at": None,
    }
    assert await ws.receive_nothing(timeout=0.2)
    await ws.disconnect()

    # A turn holds the session's lease (in any process): busy, after the backlog.
    await database_sync_to_async(lease.acquire)(session=session, message_id="msg_running")
    later = socket(session.pk, token, after=2)
    assert (await later.connect())[0]
    status = json.loads(await later.receive_from(timeout=20))
    assert (status["kind"], status["status"]) == ("status", "busy")
    assert await later.receive_nothing(timeout=0.2)
    await later.disconnect()


async def test_a_prompt_is_acked_and_its_reply_streams_live(session, token, agents, settings):
    settings.FORGE_MODEL = "offline/echo"
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)  # session.created, then the status
    await ws.send_to(
        text_data=json.dumps({"type": "prompt", "text": "stream this now", "client_id": "c1"})
    )
    ack, before = await until_ack(ws)
    assert ack["client_id"] == "c1"
    assert ack["message_id"].startswith("msg_")
    frames = before + await frames_until(ws, finished(ack["assistant_message_id"]))
    text = Text()
    for frame in frames:
        text.apply(frame)
    reply_text = next(
        f["data"]["text"]
        for f in frames
        if f.get("type") == "part.updated"
        and f["data"]["type"] == "text"
        and f["data"]["time"].get("end")
        and f["data"]["message_id"] == ack["assistant_message_id"]
    )
    assert reply_text == "stream this now"
    assert any(f["kind"] == "delta" for f in frames)
    statuses = [f["status"] for f in frames if f["kind"] == "status"]
    assert statuses[0] == "busy"
    seqs = [f["seq"] for f in frames if f["kind"] == "event"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    await ws.disconnect()


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "bad_json"),
        ("[1, 2]", "bad_frame"),
        (json.dumps({"type": "dance"}), "unknown_type"),
        (json.dumps({"type": ["prompt"]}), "unknown_type"),
        ('{"type": "prompt", "text": "a \\ud800 lone surrogate"}', "invalid_prompt"),
        (json.dumps({"type": "prompt", "text": "a NUL \x00"}), "invalid_prompt"),
        (json.dumps({"type": "prompt"}), "invalid_prompt"),
        (json.dumps({"type": "prompt", "text": "x" * 100_001}), "too_large"),
        (json.dumps({"type": "prompt", "text": "hi", "agent": "nobody"}), "unknown_agent"),
        (json.dumps({"type": "abort"}), "not_running"),
        ('{"type": "prompt", "client_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "bad_json"),
        ('{"type": "prompt", "text": "hi", "n": ' + "7" * 5000 + "}", "bad_json"),
        # QA: any JSON was echoed back in the ack and error frames
        (json.dumps({"type": "prompt", "text": "hi", "client_id": {"a": 1}}), "bad_frame"),
        (json.dumps({"type": "prompt", "text": "hi", "client_id": 3.5}), "bad_frame"),
        (json.dumps({"type": "abort", "client_id": "c" * 257}), "bad_frame"),
        # QA: the socket took what HTTP refuses as no JSON; a megabyte's call_id came back
        ('{"type": "prompt", "text": "hi", "x": NaN}', "bad_json"),
        ('{"type": "prompt", "text": "hi", "x": -Infinity}', "bad_json"),
        ('{"type": "prompt", "text": "hi", "x": 1e999}', "bad_json"),
        (
            json.dumps({"type": "approval", "call_id": "c" * 900_000, "approve": True}),
            "invalid_answer",
        ),
        # QA: acked and run, the files silently dropped (HTTP refuses a text ``files``)
        (json.dumps({"type": "prompt", "text": "see", "files": ["a.txt"]}), "invalid_prompt"),
    ],
    ids=[
        "not json",
        "not an object",
        "unknown type",
        "type not a string",
        "lone surrogate",
        "NUL",
        "no text",
        "too large",
        "unknown agent",
        "abort idle",
        "nested too deeply",
        "an integer of 5000 digits",
        "client_id an object",
        "client_id a number",
        "client_id too long",
        "NaN",
        "-Infinity",
        "a number no float holds",
        "call_id too long",
        "files",
    ],
)
async def test_bad_frames_get_an_error_frame_and_the_socket_stays_open(
    session, token, agents, frame, code
):
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)
    await ws.send_to(text_data=frame)
    reply = json.loads(await ws.receive_from(timeout=5))
    assert reply["kind"] == "error"
    assert reply["code"] == code
    assert reply["message"]
    if "[[[" in frame:  # QA (LOW): it said "a frame must be a JSON object"
        assert reply["message"] == "the frame's JSON is nested too deeply"
    if "7777" in frame:  # QA (LOW): it said "a frame must be a JSON object" too
        assert reply["message"] == "a number in the frame has more than 4300 digits"
    if "client_id" in frame and code == "bad_frame":
        assert reply["client_id"] is None
    if "NaN" in frame or "Infinity" in frame or "1e999" in frame:
        assert reply["message"].endswith("which is no JSON number")
    if code == "invalid_answer":
        assert reply["call_id"] is None
    if '"files"' in frame:
        assert "multipart" in reply["message"]
    await ws.send_to(text_data=json.dumps({"type": "ping"}))
    assert json.loads(await ws.receive_from(timeout=20)) == {"kind": "pong"}
    await ws.disconnect()
    assert await database_sync_to_async(session.events.count)() == 1  # nothing written


async def test_a_prompt_to_a_busy_session_gets_a_busy_error(session, token, agents, script):
    script([paced(words(100), 0.01)])
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "one"}))
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "two", "client_id": "second"}))
    frames = await frames_until(ws, lambda f: any(x["kind"] == "error" for x in f))
    error = next(f for f in frames if f["kind"] == "error")
    assert (error["code"], error["client_id"]) == ("busy", "second")
    await ws.send_to(text_data=json.dumps({"type": "abort"}))
    await frames_until(
        ws, lambda f: any(x.get("kind") == "status" and x["status"] == "idle" for x in f)
    )
    await ws.disconnect()


async def test_connecting_mid_reply_gives_a_snapshot_then_the_rest_without_holes(
    session, token, agents, script
):
    deltas = words(300)
    script([paced(deltas, 0.003)])
    first = socket(session.pk, token)
    await first.connect()
    await first.send_to(text_data=json.dumps({"type": "prompt", "text": "go"}))
    ack, before = await until_ack(first)
    # A third of the reply (deltas travel coalesced: count words, not frames).
    seen = before + await frames_until(
        first, lambda f: sum(len(x["delta"].split()) for x in f if x["kind"] == "delta") >= 100
    )
    last_seq = max(f["seq"] for f in seen if f["kind"] == "event")
    await first.disconnect()
    second = socket(session.pk, token, after=last_seq)
    await second.connect()
    frames = await frames_until(second, finished(ack["assistant_message_id"]))
    assert frames[0]["kind"] == "snapshot"
    assert len(frames[0]["text"]) > 0
    text = Text()
    for frame in seen + frames:
        text.apply(frame)
    final = next(
        f["data"]["text"]
        for f in frames
        if f.get("type") == "part.updated"
        and f["data"]["type"] == "text"
        and f["data"]["time"].get("end")
    )
    assert final == "".join(deltas).rstrip()
    assert text.parts[frames[0]["part_id"]] == final
    await second.disconnect()


async def test_frames_the_layer_drops_are_repaired_from_the_log_and_snapshots(
    session, token, agents, script, monkeypatch, settings
):
    """Drop every third frame on its way through the channel layer."""
    settings.FORGE_DELTA_WINDOW_MS = 0  # a frame per delta: many frames to lose
    deltas = words(150)
    script([paced(deltas, 0.002)])
    layer = get_channel_layer()
    send = layer.group_send
    count = {"sent": 0, "dropped": 0}

    async def lossy(group: str, message: dict[str, Any]) -> None:
        count["sent"] += 1
        if group.startswith("forge.session.") and count["sent"] % 3 == 0:
            count["dropped"] += 1
            return
        await send(group, message)

    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)
    monkeypatch.setattr(layer, "group_send", lossy)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "go"}))
    ack, before = await until_ack(ws)
    frames = before + await frames_until(ws, finished(ack["assistant_message_id"]))
    assert count["dropped"] > 20
    seqs = [f["seq"] for f in frames if f["kind"] == "event"]
    assert seqs == list(range(2, 2 + len(seqs)))  # every event, once, in order
    text = Text()
    for frame in frames:
        text.apply(frame)  # asserts no hole and no repeat
    assert any(f["kind"] == "snapshot" for f in frames)  # offset gaps were repaired
    final = next(
        f["data"]["text"]
        for f in frames
        if f.get("type") == "part.updated"
        and f["data"]["type"] == "text"
        and f["data"]["time"].get("end")
    )
    assert final == "".join(deltas).rstrip()
    await ws.disconnect()


async def test_losing_the_last_events_of_a_reply_is_repaired_once_the_stream_goes_quiet(
    session, token, agents, settings, monkeypatch
):
    """Nothing follows the completing event to reveal the gap: the stream re-reads the log."""
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.3
    layer = get_channel_layer()
    send = layer.group_send
    dropping: dict[str, Any] = {"on": False, "dropped": []}

    async def lose_the_tail(group: str, message: dict[str, Any]) -> None:
        frame = message.get("frame", {})
        data = frame.get("data", {})
        if frame.get("type") == "message.updated" and data.get("completed_at"):
            dropping["on"] = True  # from the completing event on, everything is lost
        if dropping["on"] and group.startswith("forge.session."):
            dropping["dropped"].append(frame.get("type"))
            return
        await send(group, message)

    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)
    monkeypatch.setattr(layer, "group_send", lose_the_tail)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "the end matters"}))
    ack, before = await until_ack(ws)
    frames = before + await frames_until(ws, finished(ack["assistant_message_id"]), timeout=10)
    # The completing event was lost on the way, and nothing followed it to reveal the gap
    # (the idle status, if sent yet, was lost too): the client still got it, from the log.
    assert dropping["dropped"][0] == "message.updated"
    assert set(dropping["dropped"]) <= {"message.updated", "session.status"}
    seqs = [f["seq"] for f in frames if f["kind"] == "event"]
    assert seqs == list(range(2, 2 + len(seqs)))
    await ws.disconnect()


async def test_a_lost_idle_status_is_said_again_once_the_lost_tail_is_read(
    session, token, agents, settings, monkeypatch
):
    """QA (MEDIUM): the layer lost a reply's last frames, its ``idle`` status with them;
    the stream read the lost events from the log once it went quiet, but no status: the
    client (the chat page's busy state is the status) showed the turn running until the
    next one. With the turn's end read from the log, the stream says the session's
    status as read then."""
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_STREAM_RESYNC_SECONDS = 0.3
    layer = get_channel_layer()
    send = layer.group_send
    dropping = {"on": False}

    async def lose_the_tail(group: str, message: dict[str, Any]) -> None:
        frame = message.get("frame", {})
        if frame.get("type") == "message.updated" and frame.get("data", {}).get("completed_at"):
            dropping["on"] = True  # from the completing event on, everything is lost
        if dropping["on"] and group.startswith("forge.session."):
            return
        await send(group, message)

    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)
    monkeypatch.setattr(layer, "group_send", lose_the_tail)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "the end matters"}))
    ack, _ = await until_ack(ws)
    await frames_until(ws, finished(ack["assistant_message_id"]), timeout=10)
    after = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "status", timeout=10)
    assert [f["status"] for f in after if f["kind"] == "status"] == ["idle"]
    await ws.disconnect()


async def test_a_prompt_refused_as_busy_still_sees_the_running_turn_end(
    session, token, agents, settings
):
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.05
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)  # session.created, then the status
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": " ".join(["word"] * 20)}))
    await until_ack(ws)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "again", "client_id": "c2"}))
    frames = await frames_until(
        ws, lambda f: any(x["kind"] == "status" and x["status"] == "idle" for x in f), timeout=20
    )
    refused = [f for f in frames if f["kind"] == "error"]
    assert [(f["code"], f["client_id"]) for f in refused] == [("busy", "c2")]
    await ws.disconnect()


async def test_the_socket_shares_the_prompt_throttle_with_http(
    session, user, token, agents, monkeypatch
):
    from django.core.cache import cache
    from rest_framework.test import APIClient
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setattr(
        SimpleRateThrottle, "THROTTLE_RATES", {"prompts": "1/min", "user": "1000/min"}
    )
    await database_sync_to_async(cache.delete)(f"throttle_prompts_{user.pk}")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    url = f"/api/sessions/{session.pk}/messages/"
    first = await database_sync_to_async(client.post)(url, {"text": ""}, format="json")
    assert first.status_code == 400  # counted, like any prompt
    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "hi", "client_id": "c"}))
    frame = json.loads(await ws.receive_from(timeout=5))
    assert (frame["kind"], frame["code"], frame["client_id"]) == ("error", "throttled", "c")
    assert frame["retry_after"] > 0
    await ws.send_to(text_data=json.dumps({"type": "ping"}))
    assert json.loads(await ws.receive_from(timeout=5)) == {"kind": "pong"}  # still open
    await ws.disconnect()


async def test_open_sockets_and_sse_streams_are_capped_per_user(session, token, settings):
    from django.test import AsyncClient

    settings.FORGE_MAX_STREAMS_PER_USER = 2
    first, second = socket(session.pk, token), socket(session.pk, token)
    for ws in (first, second):
        assert (await ws.connect(timeout=10))[0]
        await backlog(ws)
    third = socket(session.pk, token)
    await third.connect()
    frame = json.loads(await third.receive_from(timeout=5))
    assert (frame["kind"], frame["code"]) == ("error", "too_many_streams")
    assert (await third.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4429}
    refused = await AsyncClient().get(
        f"/api/sessions/{session.pk}/stream/", headers={"Authorization": f"Token {token}"}
    )
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_streams"
    await first.disconnect()
    again = socket(session.pk, token)
    assert (await again.connect())[0]
    await backlog(again)  # a closed socket gave its place back
    for ws in (second, again):
        await ws.disconnect()


async def test_opening_a_stream_counts_against_the_users_api_rate(
    session, user, token, monkeypatch
):
    """QA (LOW): once a user was over ``FORGE_API_RATE`` every API route answered 429,
    but the SSE stream and the socket still opened (and replayed the log), though the
    contract says rate limits apply to every face alike. Opening a stream is one
    request: over the rate, SSE is 429 with Retry-After, the socket an error frame and
    4429."""
    from django.core.cache import cache
    from django.test import AsyncClient
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setattr(
        SimpleRateThrottle, "THROTTLE_RATES", {"prompts": "60/min", "user": "2/min"}
    )
    await database_sync_to_async(cache.delete)(f"throttle_user_{user.pk}")
    auth = {"Authorization": f"Token {token}"}
    stream_url = f"/api/sessions/{session.pk}/stream/"
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=10))[0]  # the first request
    await backlog(ws)
    await ws.disconnect()
    listed = await AsyncClient().get("/api/sessions/", headers=auth)  # the second
    assert listed.status_code == 200
    refused = await AsyncClient().get(stream_url, headers=auth)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "throttled"
    assert int(refused["Retry-After"]) > 0
    over = socket(session.pk, token)
    await over.connect()
    frame = json.loads(await over.receive_from(timeout=5))
    assert (frame["kind"], frame["code"]) == ("error", "throttled")
    assert frame["retry_after"] > 0
    assert (await over.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4429}


async def test_a_socket_path_that_names_no_route_closes_4404(token):
    for path in ("/ws/nothing/", "/ws/sessions/", "/ws/sessions/a/b/", "/elsewhere"):
        ws = WebsocketCommunicator(
            application, path, headers=[ORIGIN, (b"authorization", f"Token {token}".encode())]
        )
        await ws.connect(timeout=10)
        assert (await ws.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4404}
        await ws.disconnect()


async def test_a_client_leaving_while_its_backlog_is_sent_is_no_error(
    session, token, settings, monkeypatch, caplog
):
    """QA (LOW): a client that closed while its backlog was being sent made
    ``connect`` raise autobahn's ``Disconnected`` (logged by daphne as an exception
    inside the application, with a traceback). It is a client leaving: its stream's
    place is given back, and nothing is logged as an error."""
    from forge.realtime import consumer as consumer_module

    settings.FORGE_MAX_STREAMS_PER_USER = 1
    send = consumer_module.SessionConsumer._send

    async def gone(self: Any, frame: dict) -> None:
        raise consumer_module.Disconnected("Attempt to send on a closed protocol")

    monkeypatch.setattr(consumer_module.SessionConsumer, "_send", gone)
    left = socket(session.pk, token)
    await left.connect()
    await left.disconnect()  # raised the application's exception
    monkeypatch.setattr(consumer_module.SessionConsumer, "_send", send)
    again = socket(session.pk, token)
    assert (await again.connect())[0]
    await backlog(again)  # the place was given back
    await again.disconnect()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_requested_snapshot_never_follows_the_end_of_its_part(session, token):
    """A part's end was sent with its whole text; the in-flight store can still hold the
    part (the writer drops it only once the end is written: stale, even empty). A
    snapshot the client asks for then must leave the part out: applied, it blanked a
    finished part (QA, 1 run in 10 with snapshots asked every 3 ms)."""
    message = await database_sync_to_async(services.update_message)(
        session=session, info={"role": "assistant"}
    )
    message_id = message.data["id"]
    part = await database_sync_to_async(services.update_part)(
        session=session,
        part={
            "message_id": message_id,
            "type": "text",
            "text": "the whole finished text",
            "time": {"start": "2026-12-07T10:00:00.000Z", "end": "2026-12-07T10:00:01.000Z"},
        },
    )
    part_id = part.data["id"]
    shared = inflight.mirror()
    if shared is not None:
        await shared.open(
            session_id=session.pk, message_id=message_id, part_id=part_id, field="text"
        )
    else:
        inflight.buffer.open(session_id=session.pk, message_id=message_id, part_id=part_id)
    try:
        assert [s["part_id"] for s in await inflight.snapshots(session.pk)] == [part_id]
        ws = socket(session.pk, token)
        await ws.connect(timeout=10)
        frames = await backlog(ws)
        assert not any(f["kind"] == "snapshot" for f in frames)  # the backlog's own filter
        await ws.send_to(text_data=json.dumps({"type": "snapshot"}))
        await ws.send_to(text_data=json.dumps({"type": "ping"}))
        after = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "pong")
        assert [f["kind"] for f in after] == ["pong"]
        await ws.disconnect()
    finally:
        if shared is not None:
            await shared.close(session_id=session.pk, part_id=part_id)
        else:
            inflight.buffer.close(part_id)


async def test_a_requested_snapshot_never_takes_back_text_the_socket_sent(session, token):
    """A snapshot the client asks for is read from the in-flight store while the socket
    keeps forwarding deltas: one that arrives after the read and before its answer was
    sent first, and the older snapshot after it took the client's text back (and the
    stream's own count with it, so the next delta was a hole to repair). Here the store
    lags the delta the socket sent, as such a read does."""
    message = await database_sync_to_async(services.update_message)(
        session=session, info={"role": "assistant"}
    )
    message_id = message.data["id"]
    part = await database_sync_to_async(services.update_part)(
        session=session,
        part={
            "message_id": message_id,
            "type": "text",
            "text": "",
            "time": {"start": "2026-12-07T10:00:00.000Z"},
        },
    )
    part_id = part.data["id"]
    shared = inflight.mirror()
    if shared is not None:
        await shared.open(
            session_id=session.pk, message_id=message_id, part_id=part_id, field="text"
        )
        await shared.append(part_id, "abc")
    else:
        inflight.buffer.open(session_id=session.pk, message_id=message_id, part_id=part_id)
        inflight.buffer.append(part_id, "abc")
    try:
        ws = socket(session.pk, token)
        await ws.connect(timeout=10)
        frames = await backlog(ws)
        assert [f["text"] for f in frames if f["kind"] == "snapshot"] == ["abc"]
        await services.apublish_delta(
            session=session,
            message_id=message_id,
            part_id=part_id,
            field="text",
            offset=3,
            delta="def",
        )
        [delta] = await frames_until(ws, lambda f: bool(f))
        assert (delta["kind"], delta["offset"], delta["delta"]) == ("delta", 3, "def")
        await ws.send_to(text_data=json.dumps({"type": "snapshot"}))
        await ws.send_to(text_data=json.dumps({"type": "ping"}))
        after = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] == "pong")
        text = Text()
        for frame in [*frames, delta, *after]:
            text.apply(frame)  # a snapshot that goes back fails here
        assert text.parts[part_id] == "abcdef"
        await ws.disconnect()
    finally:
        if shared is not None:
            await shared.close(session_id=session.pk, part_id=part_id)
        else:
            inflight.buffer.close(part_id)
