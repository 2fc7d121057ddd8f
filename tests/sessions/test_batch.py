"""``append_batch``: several writes in one transaction, each its own event, validated
exactly as the single entries validate them, all or nothing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections, connection, transaction

from accounts.exceptions import ForgeError
from sessions import bus, selectors, services, sql
from sessions.exceptions import InvalidEvent, InvalidMessage, InvalidPart, NotFound
from sessions.ids import new_message_id, new_part_id
from sessions.models import Message, Part, Session, SessionEvent
from sessions.projector import compare
from sessions.services import (
    AppendEvent,
    RemoveMessage,
    RemovePart,
    UpdateMessage,
    UpdatePart,
    append_batch,
)

pytestmark = pytest.mark.django_db(transaction=True)


def turn_writes(session: Session, text: str = "hello") -> tuple[list[services.Write], str, str]:
    """A whole turn as the runtime writes it: prompt, step, reply."""
    user_id, reply_id = new_message_id(), new_message_id()
    start, text_id, finish_id = new_part_id(), new_part_id(), new_part_id()
    writes: list[services.Write] = [
        AppendEvent(type="context.updated", data={"blocks": [{"kind": "system", "key": "a"}]}),
        UpdateMessage(info={"id": user_id, "role": "user"}),
        UpdatePart(part={"message_id": user_id, "type": "text", "text": text}),
        UpdateMessage(info={"id": reply_id, "role": "assistant", "parent_id": user_id}),
        UpdatePart(part={"id": start, "message_id": reply_id, "type": "step-start"}),
        UpdatePart(
            part={
                "id": text_id,
                "message_id": reply_id,
                "type": "text",
                "text": "",
                "time": {"start": "2026-01-01T00:00:00.000Z"},
            }
        ),
        # An update of a part created earlier in the batch: omitted fields keep theirs.
        UpdatePart(
            part={
                "id": text_id,
                "text": f"re: {text}",
                "time": {"start": "2026-01-01T00:00:00.000Z", "end": "2026-01-01T00:00:01.000Z"},
            }
        ),
        UpdatePart(
            part={"id": finish_id, "message_id": reply_id, "type": "step-finish", "reason": "stop"}
        ),
        UpdateMessage(
            info={"id": reply_id, "finish": "stop", "completed_at": "2026-01-01T00:00:02.000Z"}
        ),
    ]
    return writes, user_id, reply_id


def head(session: Session) -> int:
    return selectors.head_seq(tenant=session.tenant, session_id=session.pk)


def test_a_batch_appends_one_event_per_write_in_order_after_the_head(session):
    before = head(session)
    writes, user_id, reply_id = turn_writes(session)
    events = append_batch(session=session, writes=writes)
    assert [e.seq for e in events] == list(range(before + 1, before + 1 + len(writes)))
    stored = list(session.events.filter(seq__gt=before).order_by("seq"))
    assert [(e.id, e.seq, e.type, e.hash, e.data) for e in stored] == [
        (e.id, e.seq, e.type, e.hash, e.data) for e in events
    ]
    assert [e.type for e in events] == [
        "context.updated",
        "message.updated",
        "part.updated",
        "message.updated",
        "part.updated",
        "part.updated",
        "part.updated",
        "part.updated",
        "message.updated",
    ]
    assert len({e.hash for e in events}) == len(events)
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    user, reply = history
    assert user["info"]["id"] == user_id
    assert [p["text"] for p in user["parts"]] == ["hello"]
    assert reply["info"]["id"] == reply_id
    assert reply["info"]["finish"] == "stop"
    assert reply["info"]["parent_id"] == user_id  # kept from the earlier write in the batch
    assert [p["type"] for p in reply["parts"]] == ["step-start", "text", "step-finish"]
    text = reply["parts"][1]
    assert text["text"] == "re: hello"
    assert text["time"]["end"] == "2026-01-01T00:00:01.000Z"
    assert text["message_id"] == reply_id  # merged from the part's first write


def test_the_projection_after_batches_equals_a_rebuild_from_the_log(session):
    for n in range(3):
        writes, user_id, _ = turn_writes(session, f"turn {n}")
        append_batch(session=session, writes=writes)
    parts = list(Part.objects.filter(session=session, type="text").values_list("id", flat=True))
    append_batch(
        session=session,
        writes=[RemovePart(part_id=parts[0]), RemoveMessage(message_id=user_id)],
    )
    expected = selectors.projection_from_log(tenant=session.tenant, session=session)
    stored = selectors.stored_projection(tenant=session.tenant, session=session)
    assert compare(expected, stored) == []
    assert len(stored.messages) == 5
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_batches_and_single_writes_chain_into_one_verifiable_log(session, user_message):
    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "a"}
    )
    writes, _, _ = turn_writes(session)
    append_batch(session=session, writes=writes)
    services.update_part(
        session=session, part={"message_id": user_message["id"], "type": "text", "text": "b"}
    )
    seqs = list(session.events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_an_empty_batch_writes_nothing(session):
    before = head(session)
    assert append_batch(session=session, writes=[]) == []
    assert head(session) == before


# --- refusals: the single entry's error, and nothing written ----------------------------


T0, T1 = "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z"
TOOL_STATES = {
    "pending": {"status": "pending"},
    "running": {"status": "running", "input": {}, "time": {"start": T0}},
    "completed": {
        "status": "completed",
        "input": {},
        "output": "ok",
        "time": {"start": T0, "end": T1},
    },
}


def _tool(message_id: str, part_id: str, status: str) -> UpdatePart:
    return UpdatePart(
        part={
            "id": part_id,
            "message_id": message_id,
            "type": "tool",
            "call_id": "c1",
            "tool": "read_file",
            "state": TOOL_STATES[status],
        }
    )


def refusals(session: Session, other: Session, stored: dict[str, str]) -> dict[str, Any]:
    """Invalid sequences of writes, each ending in the write that is refused."""
    fresh, part = new_message_id(), new_part_id()
    other_message = services.update_message(session=other, info={"role": "user"}).data["id"]
    return {
        "unknown part type": [
            UpdateMessage(info={"id": fresh, "role": "user"}),
            UpdatePart(part={"message_id": fresh, "type": "picture"}),
        ],
        "part of an unknown message": [
            UpdatePart(part={"message_id": new_message_id(), "type": "text", "text": "x"}),
        ],
        "part of another session's message": [
            UpdatePart(part={"message_id": other_message, "type": "text", "text": "x"}),
        ],
        "tool state going backwards in the batch": [
            UpdateMessage(info={"id": fresh, "role": "assistant"}),
            _tool(fresh, part, "pending"),
            _tool(fresh, part, "completed"),
            _tool(fresh, part, "running"),
        ],
        "part of a message removed earlier in the batch": [
            RemoveMessage(message_id=stored["message"]),
            UpdatePart(part={"id": stored["part"], "text": "after removal"}),
        ],
        "removing an unknown part": [RemovePart(part_id=new_part_id())],
        "removing another session's message": [RemoveMessage(message_id=other_message)],
        "a parent that is not in the session": [
            UpdateMessage(info={"role": "assistant", "parent_id": other_message}),
        ],
        "a role change": [
            UpdateMessage(info={"id": fresh, "role": "user"}),
            UpdateMessage(info={"id": fresh, "role": "assistant"}),
        ],
        "an event type that has its own service": [
            UpdateMessage(info={"id": fresh, "role": "user"}),
            AppendEvent(type="message.updated", data={}),
        ],
    }


def one_by_one(session: Session, writes: list[services.Write]) -> ForgeError:
    """The error the single entries raise for these writes, in a transaction rolled back."""
    entries: dict[type, Callable[..., Any]] = {
        UpdateMessage: lambda w: services.update_message(session=session, info=w.info),
        UpdatePart: lambda w: services.update_part(session=session, part=w.part),
        RemovePart: lambda w: services.remove_part(session=session, part_id=w.part_id),
        RemoveMessage: lambda w: services.remove_message(session=session, message_id=w.message_id),
        AppendEvent: lambda w: services.append_event(session=session, type=w.type, data=w.data),
    }

    class Undo(Exception):
        pass

    try:
        with transaction.atomic():
            for write in writes:
                entries[type(write)](write)
            raise Undo
    except ForgeError as exc:
        return exc
    raise AssertionError("the single entries accepted every write")


def test_one_refused_write_refuses_the_batch_with_the_single_entry_error(session, user):
    from sessions.services import create_session

    other = create_session(user=user, title="other")
    message = services.update_message(session=session, info={"role": "user"}).data["id"]
    part = services.update_part(
        session=session, part={"message_id": message, "type": "text", "text": "kept"}
    ).data["id"]
    cases = refusals(session, other, {"message": message, "part": part})
    valid_first = [UpdateMessage(info={"role": "user"})]
    for name, writes in cases.items():
        expected = one_by_one(session, writes)
        before = (head(session), Message.objects.count(), Part.objects.count())
        with pytest.raises(type(expected)) as refused:
            append_batch(session=session, writes=[*valid_first, *writes])
        assert str(refused.value) == str(expected), name
        assert type(refused.value) is type(expected), name
        assert (head(session), Message.objects.count(), Part.objects.count()) == before, name
    assert Part.objects.get(pk=part).data["text"] == "kept"
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_the_refusals_are_the_documented_kinds(session, user):
    from sessions.services import create_session

    other = create_session(user=user, title="other")
    message = services.update_message(session=session, info={"role": "user"}).data["id"]
    part = services.update_part(
        session=session, part={"message_id": message, "type": "text", "text": "kept"}
    ).data["id"]
    cases = refusals(session, other, {"message": message, "part": part})
    kinds = {}
    for name, writes in cases.items():
        try:
            append_batch(session=session, writes=writes)
        except ForgeError as exc:
            kinds[name] = type(exc).__name__
    assert kinds == {
        "unknown part type": InvalidPart.__name__,
        "part of an unknown message": InvalidPart.__name__,
        "part of another session's message": "SessionMismatch",
        "tool state going backwards in the batch": InvalidPart.__name__,
        "part of a message removed earlier in the batch": InvalidPart.__name__,
        "removing an unknown part": NotFound.__name__,
        "removing another session's message": NotFound.__name__,
        "a parent that is not in the session": InvalidMessage.__name__,
        "a role change": InvalidMessage.__name__,
        "an event type that has its own service": InvalidEvent.__name__,
    }


def test_a_batch_holds_writes_only(session):
    with pytest.raises(InvalidEvent, match="holds writes"):
        append_batch(session=session, writes=[{"role": "user"}])  # type: ignore[list-item]


def test_a_batch_for_a_missing_session_is_not_found(session):
    ghost = Session(pk="ses_missing", tenant_id=session.tenant_id)
    with pytest.raises(NotFound):
        append_batch(session=ghost, writes=[UpdateMessage(info={"role": "user"})])


# --- the bus ---------------------------------------------------------------------------


async def subscribe(session: Any) -> tuple[Any, str]:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(bus.session_group(session.pk), channel)
    return layer, channel


async def next_frame(layer: Any, channel: str, timeout: float = 5) -> dict:
    message = await asyncio.wait_for(layer.receive(channel), timeout=timeout)
    return message["frame"]


async def test_every_event_of_a_batch_is_its_own_frame_in_order(session):
    layer, channel = await subscribe(session)
    writes, _, _ = await database_sync_to_async(turn_writes)(session)
    events = await database_sync_to_async(append_batch)(session=session, writes=writes)
    frames = [await next_frame(layer, channel) for _ in events]
    assert [(f["kind"], f["seq"], f["id"], f["type"], f["data"]) for f in frames] == [
        ("event", e.seq, e.id, e.type, e.data) for e in events
    ]


async def test_a_refused_batch_publishes_nothing(session):
    layer, channel = await subscribe(session)
    with pytest.raises(InvalidPart):
        await database_sync_to_async(append_batch)(
            session=session,
            writes=[
                UpdateMessage(info={"role": "user"}),
                UpdatePart(part={"message_id": "msg_missing", "type": "text", "text": "x"}),
            ],
        )
    marker = await database_sync_to_async(services.update_message)(
        session=session, info={"role": "user"}
    )
    frame = await next_frame(layer, channel)
    assert (frame["seq"], frame["id"]) == (marker.seq, marker.id)


async def test_a_batch_in_a_transaction_publishes_at_its_commit_and_not_on_rollback(session):
    layer, channel = await subscribe(session)

    def in_transaction(roll_back: bool) -> list[SessionEvent]:
        class Undo(Exception):
            pass

        try:
            with transaction.atomic():
                events = append_batch(session=session, writes=turn_writes(session)[0])
                assert SessionEvent.objects.filter(session=session).count() > 1
                if roll_back:
                    raise Undo
                return events
        except Undo:
            return []

    assert await database_sync_to_async(in_transaction)(True) == []
    events = await database_sync_to_async(in_transaction)(False)
    frames = [await next_frame(layer, channel) for _ in events]
    assert [f["seq"] for f in frames] == [e.seq for e in events] == list(range(2, 11))


# --- concurrency -------------------------------------------------------------------------

WRITERS = 8
ROUNDS = 60


def _writer(session_id: str, message_id: str, n: int, errors: list, barrier: Any) -> None:
    try:
        session = Session.objects.get(pk=session_id)
        barrier.wait()
        for i in range(ROUNDS):
            texts = [f"writer {n} round {i} part {k}" for k in range(3)]
            if (i + n) % 2:
                append_batch(
                    session=session,
                    writes=[
                        UpdatePart(part={"message_id": message_id, "type": "text", "text": t})
                        for t in texts
                    ],
                )
            else:
                for t in texts:
                    services.update_part(
                        session=session, part={"message_id": message_id, "type": "text", "text": t}
                    )
    except Exception as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


@pytest.mark.timeout(600)
def test_concurrent_batches_and_single_writes_stay_gap_free(user):
    session = services.create_session(user=user)
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    errors: list[Exception] = []
    barrier = threading.Barrier(WRITERS)
    threads = [
        threading.Thread(target=_writer, args=(session.pk, message_id, n, errors, barrier))
        for n in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    close_old_connections()
    assert errors == []
    seqs = list(session.events.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 2 + WRITERS * ROUNDS * 3 + 1))
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
    expected = selectors.projection_from_log(tenant=session.tenant, session=session)
    assert (
        compare(expected, selectors.stored_projection(tenant=session.tenant, session=session)) == []
    )
    texts = list(
        session.events.filter(type="part.updated").order_by("seq").values_list("data", flat=True)
    )
    for n in range(WRITERS):
        mine = [d["text"] for d in texts if d["text"].startswith(f"writer {n} ")]
        assert mine == [f"writer {n} round {i} part {k}" for i in range(ROUNDS) for k in range(3)]
    # A batch's events are contiguous: no other writer's event lands inside one.
    by_seq = {d["text"]: s for d, s in zip(texts, range(3, len(texts) + 3), strict=True)}
    for n in range(WRITERS):
        for i in range(ROUNDS):
            if (i + n) % 2:
                first = by_seq[f"writer {n} round {i} part 0"]
                assert [by_seq[f"writer {n} round {i} part {k}"] for k in range(3)] == [
                    first,
                    first + 1,
                    first + 2,
                ]


@pytest.mark.postgres_only
def test_a_batch_that_loses_the_race_for_its_seqs_retries_and_lands_after_the_winner(
    user, monkeypatch: Any
):
    """The optimistic path: a concurrent writer commits between the batch's read and write."""
    session = services.create_session(user=user)
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    read = sql.read_batch_head
    raced: list[bool] = []
    me = threading.current_thread()

    def rival() -> None:
        try:
            services.update_part(
                session=Session.objects.get(pk=session.pk),
                part={"message_id": message_id, "type": "text", "text": "rival"},
            )
        finally:
            connection.close()

    def read_then_lose_the_race(*args: Any, **kwargs: Any) -> Any:
        result = read(*args, **kwargs)
        if not raced and threading.current_thread() is me:
            raced.append(True)
            thread = threading.Thread(target=rival)
            thread.start()
            thread.join()
        return result

    monkeypatch.setattr(sql, "read_batch_head", read_then_lose_the_race)
    mine = append_batch(
        session=session,
        writes=[
            UpdatePart(part={"message_id": message_id, "type": "text", "text": f"mine {k}"})
            for k in range(3)
        ],
    )
    assert raced
    assert [e.seq for e in mine] == [4, 5, 6]
    texts = list(
        session.events.filter(type="part.updated")
        .order_by("seq")
        .values_list("data__text", flat=True)
    )
    assert texts == ["rival", "mine 0", "mine 1", "mine 2"]
    assert selectors.verify_log(tenant=session.tenant, session=session) == []


def test_sqlite_sends_a_runs_rows_as_one_insert_per_table_in_the_order_given():
    """``sql.coalesced`` (SQLite): a run of event, message and part inserts becomes one
    multi-row statement per table, tables in the order they first appear (an event
    before the rows pointing at it); anything else ends the run; a run over the
    parameter limit is split, rows kept in order."""
    dialect = _sqlite_dialect()
    event = sql.insert_event(
        dialect, event_id="e1", tenant_id=1, session_id="s", seq=1, type="t", at="now",
        data_json="{}", event_hash="00",
    )  # fmt: skip
    part = sql.upsert_part(
        dialect, part_id="p", tenant_id=1, session_id="s", message_id="m", type="text", seq=1
    )
    message = sql.upsert_message(
        dialect, message_id="m", tenant_id=1, session_id="s", role="user", seq=1
    )
    touch = sql.touch_session(session_id="s", tenant_id=1, at="now")
    out = sql.coalesced([event, message, event, part, touch, part, event])
    assert [text.split(" (")[0] for text, _ in out] == [
        f"INSERT INTO {sql.EVENT}",
        f"INSERT INTO {sql.MESSAGE}",
        f"INSERT INTO {sql.PART}",
        sql.TOUCH.split(" (")[0],
        f"INSERT INTO {sql.PART}",
        f"INSERT INTO {sql.EVENT}",
    ]
    assert out[0][0].count("), (") == 1
    assert out[0][1] == event[1] * 2
    assert out[2] == part
    assert out[4] == part
    many = sql.coalesced([part] * 400)  # 6 parameters a row: 166 rows a statement
    assert [len(params) // 6 for _, params in many] == [166, 166, 68]


def _sqlite_dialect() -> sql.Dialect:
    dialect = sql.Dialect.__new__(sql.Dialect)
    dialect.postgres, dialect.batch, dialect.json, dialect.row_key = False, False, "%s", "id"
    return dialect


def test_a_large_batch_with_parts_written_twice_projects_and_indexes_as_the_log_says(session):
    """Over one statement's worth of rows, and parts created and updated in the same
    batch (one multi-row ``INSERT … ON CONFLICT`` on SQLite): the projection equals a
    rebuild from the log, and search finds each part's final text, not its first."""
    from sessions.recall import search_history

    writes: list[services.Write] = []
    for n in range(60):
        writes += turn_writes(session, f"batch{n}")[0][1:]  # one context event is enough
    message_id = new_message_id()
    part_id = new_part_id()
    writes += [
        UpdateMessage(info={"id": message_id, "role": "user"}),
        UpdatePart(part={"id": part_id, "message_id": message_id, "type": "text", "text": "draft"}),
        UpdatePart(part={"id": part_id, "text": "final words"}),
    ]
    events = append_batch(session=session, writes=writes)
    assert len(events) == len(writes) > 300
    expected = selectors.projection_from_log(tenant=session.tenant, session=session)
    stored = selectors.stored_projection(tenant=session.tenant, session=session)
    assert compare(expected, stored) == []
    hits = search_history(tenant=session.tenant, session=session, query="re batch59")
    assert [hit.role for hit in hits] == ["assistant"]
    assert [h.part_id for h in search_history(tenant=session.tenant, session=session,
                                              query="final")] == [part_id]  # fmt: skip
    assert search_history(tenant=session.tenant, session=session, query="draft") == []
    assert selectors.verify_log(tenant=session.tenant, session=session) == []
