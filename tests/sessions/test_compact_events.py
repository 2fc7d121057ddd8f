"""An event's stored data leaves out the session's id (the row's column holds it) and every
read puts it back: the wire form, and so the hash chain, is what it was.

The log is a broad one: every part type and tool state (``script.drive``), removals, a
batch, the free events, a fork and imports (kept ids and a copy). Each event is read
both ways, as stored (raw SQL) and as every reader sees it (the ORM), and hashed over
both: only the wire form verifies, and it is exactly the stored form plus the row's
session id.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from forge.context import request_for
from sessions import models, selectors, services
from sessions.log import GENESIS_HASH, chain_hash, event_body, format_time, verify_chain
from sessions.models import (
    CREATED_KEY,
    CREATED_TYPE,
    OWN_SESSION_KEY,
    OWN_SESSION_TYPES,
    Message,
    Part,
    SessionEvent,
)

from .script import drive, user_turn

pytestmark = pytest.mark.django_db

EVENT = SessionEvent._meta.db_table


def broad_log(session: Any, user: Any) -> list[Any]:
    """Sessions whose logs hold every kind of write the services make."""
    ids = drive(session, turns=3)
    message_id = user_turn(session, "one more")
    services.append_batch(
        session=session,
        writes=[
            services.UpdatePart(part={"message_id": message_id, "type": "text", "text": "b1"}),
            services.UpdateMessage(info={"id": message_id, "agent": "plan"}),
            services.AppendEvent(
                type="context.updated",
                data={"blocks": [{"kind": "memory", "key": "m1", "text": "remember"}]},
            ),
        ],
    )
    services.update_session(session=session, title="Renamed")
    services.remove_message(session=session, message_id=message_id)
    fork = services.fork_session(session=session, user=user, before_message_id=ids["turns"][-1][0])
    lines = list(selectors.export_lines(session=session))
    events = services.parse_log(lines)
    copy = services.import_log(user=user, events=events, copy=True)
    return [session, fork, copy]


def stored_rows(session: Any) -> list[tuple[int, str, str, str, dict[str, Any], str]]:
    """The session's events as stored: seq, id, type, at, data, hash (hex)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT seq, id, type, data, hash FROM {EVENT} WHERE session_id = %s ORDER BY seq",
            [session.pk],
        )
        rows = cursor.fetchall()
    ats = dict(SessionEvent.objects.filter(session=session).values_list("seq", "at"))
    return [
        (seq, event_id, kind, format_time(ats[seq]), _json(data), bytes(digest).hex())
        for seq, event_id, kind, data, digest in rows
    ]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def test_every_event_hashes_the_same_over_its_wire_form_rebuilt_from_the_stored_one(session, user):
    sessions = broad_log(session, user)
    seen: set[str] = set()
    created = 0
    for each in sessions:
        wire = list(selectors.iter_log(session=each))
        stored = stored_rows(each)
        assert len(wire) == len(stored) > 10
        assert verify_chain(wire, session_id=each.pk) == []
        prev = GENESIS_HASH
        for event, (seq, event_id, kind, at, data, digest) in zip(wire, stored, strict=True):
            seen.add(kind)
            assert (event["seq"], event["id"], event["type"], event["at"]) == (
                seq,
                event_id,
                kind,
                at,
            )
            if kind in OWN_SESSION_TYPES:
                # Stored without what the row holds; the wire form is the stored one plus
                # the row's session id, and a message's created_at when it is the row's at.
                assert OWN_SESSION_KEY not in data
                held = {OWN_SESSION_KEY: each.pk}
                if kind == CREATED_TYPE and CREATED_KEY not in data:
                    held[CREATED_KEY] = at
                    created += 1
                assert event["data"] == {**data, **held}
                bare = event_body(
                    seq=seq, id=event_id, session_id=each.pk, type=kind, at=at, data=data
                )
                assert chain_hash(prev, bare) != digest  # the stored form alone does not verify
            else:
                assert event["data"] == data
            rebuilt = event_body(
                seq=seq, id=event_id, session_id=each.pk, type=kind, at=at, data=event["data"]
            )
            assert chain_hash(prev, rebuilt) == digest == event["hash"]
            prev = digest
    assert {"session.created", "session.updated", "context.updated"} <= seen
    assert {"message.updated", "message.removed", "part.updated", "part.removed"} <= seen
    # Messages stored without the created_at their row's at gives back (each is taken a
    # few µs before its event's at: the same millisecond but for a rare few).
    assert created > 0


def test_every_reader_sees_the_wire_form(session, user):
    """Model instances, ``values()``, a projection's ``data``, the hand-written reads of the
    append path and of the runtime, the export, an import keeping ids."""
    drive(session, turns=2)
    message = Message.objects.filter(session=session, role="assistant").first()
    part = Part.objects.filter(session=session).first()
    assert message is not None
    assert part is not None
    assert message.data[OWN_SESSION_KEY] == session.pk
    assert part.data[OWN_SESSION_KEY] == session.pk
    assert all(
        d[OWN_SESSION_KEY] == session.pk
        for d in Part.objects.filter(session=session).values_list("data", flat=True)
    )
    assert all(
        d[OWN_SESSION_KEY] == session.pk
        for d in SessionEvent.objects.filter(
            session=session, type__in=OWN_SESSION_TYPES
        ).values_list("data", flat=True)
    )
    found = selectors.messages_by_id(
        tenant=session.tenant, session=session, message_ids=[message.pk]
    )
    assert found[message.pk]["info"] == message.data
    assert all(p[OWN_SESSION_KEY] == session.pk for p in found[message.pk]["parts"])
    # An update merges over the stored message, read back by the append path's SQL.
    event = services.update_message(session=session, info={"id": message.pk, "agent": "plan"})
    assert event.data == {**message.data, "agent": "plan"}
    # Export, delete, import keeping the ids: the same events, byte for byte.
    lines = list(selectors.export_lines(session=session))
    services.delete_session(session=session)
    again = services.import_log(user=user, events=services.parse_log(lines))
    assert again.pk == session.pk
    assert list(selectors.export_lines(session=again)) == lines
    call_command("rebuild_projections", "--check", stdout=open("/dev/null", "w"))  # noqa: SIM115


def _replay(session: Any, seq: int) -> str:
    out = io.StringIO()
    call_command("replay_session", session.pk, "--at", str(seq), "--json", stdout=out)
    return out.getvalue()


def test_a_log_stored_the_old_way_reads_verifies_and_replays_byte_for_byte(
    session, user, monkeypatch
):
    """Rows written before migration 0012 hold ``session_id`` in their data: they read,
    verify, export, replay, rebuild and fold into the model's context exactly as the
    same log stored the new way, and new events append after them."""
    drive(session, turns=3)
    lines = list(selectors.export_lines(session=session))
    head = SessionEvent.objects.filter(session=session).order_by("-seq")[0].seq
    replays = {seq: _replay(session, seq) for seq in (head // 2, head)}
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    services.delete_session(session=session)
    # The old way: the data stored whole (what every insert did before 0012).
    with monkeypatch.context() as patched:
        patched.setattr(models, "stored_data", lambda event_type, data, session_id, at: data)
        old = services.import_log(user=user, events=services.parse_log(lines))
    assert old.pk == session.pk
    stored = stored_rows(old)
    assert any(kind in OWN_SESSION_TYPES for _, _, kind, _, _, _ in stored)
    for _, _, kind, _, data, _ in stored:
        if kind in OWN_SESSION_TYPES:
            assert data[OWN_SESSION_KEY] == old.pk  # the old form indeed
        if kind == CREATED_TYPE:
            assert CREATED_KEY in data
    assert list(selectors.export_lines(session=old)) == lines
    assert selectors.verify_log(tenant=old.tenant, session=old) == []
    assert {seq: _replay(old, seq) for seq in replays} == replays
    assert list(selectors.iter_history(tenant=old.tenant, session_id=old.pk)) == history
    call_command("rebuild_projections", "--check", stdout=io.StringIO())
    # The model's context, folded incrementally over old rows then new ones (the test
    # settings compare every cached result with the full derivation).
    request_for(old)
    message_id = user_turn(old, "after the change")
    services.update_part(
        session=old, part={"message_id": message_id, "type": "text", "text": "appended"}
    )
    request_for(old)
    mixed = stored_rows(old)
    assert OWN_SESSION_KEY not in mixed[-1][4]  # new rows: the new form
    wire = list(selectors.iter_log(session=old))
    # The new message: created_at left out exactly when it is its event's at (the two
    # are taken a few µs apart, so almost always the same millisecond).
    new_row, new_event = mixed[-3], wire[-3]  # user_turn's message, its part, one more
    assert new_row[2] == new_event["type"] == CREATED_TYPE
    assert (CREATED_KEY in new_row[4]) == (new_event["data"][CREATED_KEY] != new_event["at"])
    assert verify_chain(wire, session_id=old.pk) == []
    assert [json.loads(line) for line in selectors.export_lines(session=old)][1 : len(lines)] == [
        json.loads(line) for line in lines[1:]
    ]
    call_command("rebuild_projections", "--check", stdout=io.StringIO())
