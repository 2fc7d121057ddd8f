"""export_session / import_session / replay_session, ?copy=1, and bad export files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from forge.context import request_for
from forge.context.boundary import record_compaction
from sessions import selectors, services
from sessions.models import Message, Session, SessionEvent

pytestmark = pytest.mark.django_db

DONE = "2026-11-30T00:00:01.000Z"


def _exchange(session: Any, n: int) -> None:
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": user, "type": "text", "text": f"question {n}"}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user, "completed_at": DONE}
    ).data["id"]
    services.update_part(
        session=session, part={"message_id": reply, "type": "text", "text": f"answer {n}"}
    )


@pytest.fixture
def compacted(session: Any) -> Any:
    for n in range(3):
        _exchange(session, n)
    tail = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))[4]
    record_compaction(
        session,
        summary="SUMMARY",
        auto=False,
        overflow=False,
        tail_start_id=tail["info"]["id"],
        model="x/y",
    )
    _exchange(session, 3)
    return session


def export(session: Any, tmp_path: Path) -> Path:
    path = tmp_path / "log.jsonl"
    call_command("export_session", session.pk, "-o", str(path))
    return path


def contents(session: Any, at: int | None = None) -> list[str]:
    return [str(m["content"]) for m in request_for(session, at=at)[1].messages]


def test_export_then_import_a_copy_in_the_same_tenant(compacted, user, tmp_path, capsys):
    path = export(compacted, tmp_path)
    call_command("import_session", str(path), "--user", user.username, "--copy")
    copy_id = capsys.readouterr().out.strip()
    copy = Session.objects.get(pk=copy_id)
    assert copy.pk != compacted.pk
    assert copy.tenant == compacted.tenant
    first = SessionEvent.objects.get(session=copy, seq=1)
    head = SessionEvent.objects.filter(session=compacted).latest("seq")
    assert first.data["copied_from"] == {
        "session_id": compacted.pk,
        "head_seq": head.seq,
        "head_hash": head.hash,
    }
    assert not selectors.verify_log(tenant=copy.tenant, session=copy)
    assert not set(Message.objects.filter(session=copy).values_list("id", flat=True)) & set(
        Message.objects.filter(session=compacted).values_list("id", flat=True)
    )
    assert contents(copy) == contents(compacted)
    assert "question 0" not in contents(copy)
    assert "question 2" in contents(copy)  # the kept tail, remapped


def test_an_import_whose_ids_are_taken_becomes_a_copy(compacted, user, tmp_path, capsys):
    path = export(compacted, tmp_path)
    capsys.readouterr()
    call_command("import_session", str(path), "--user", user.username)
    copy = Session.objects.get(pk=capsys.readouterr().out.strip())
    assert copy.pk != compacted.pk
    assert contents(copy) == contents(compacted)


def test_an_import_never_tells_that_an_id_exists_in_another_tenant(
    compacted, other_user, tmp_path, capsys
):
    """Finding 8 of the reliability issue: a 409 told the importer the id existed."""
    path = export(compacted, tmp_path)
    capsys.readouterr()
    call_command("import_session", str(path), "--user", other_user.username)
    imported = Session.objects.get(pk=capsys.readouterr().out.strip())
    assert imported.pk != compacted.pk
    assert imported.tenant_id != compacted.tenant_id
    assert Session.objects.get(pk=compacted.pk).tenant_id == compacted.tenant_id


def _rehash(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Recompute the chain and the header after tampering, so the file still verifies."""
    from sessions.log import GENESIS_HASH, chain_hash, event_body

    previous = GENESIS_HASH
    for event in lines[1:]:
        names = ("seq", "id", "session_id", "type", "at", "data")
        fields: dict[str, Any] = {k: event.get(k) for k in names}  # a tampered one may lack one
        body = event_body(**fields)
        event["hash"] = previous = chain_hash(previous, body)
    lines[0]["head_hash"] = previous
    return lines


def exported_lines(api: Any, session_id: str) -> list[dict[str, Any]]:
    """A session's export, as its header and events."""
    body = b"".join(api.get(f"/api/sessions/{session_id}/export/").streaming_content)
    return [json.loads(line) for line in body.splitlines()]


def import_tampered(api: Any, lines: list[dict[str, Any]], query: str = "") -> Any:
    """Import an export edited by hand, its hash chain recomputed (:func:`_rehash`)."""
    return api.generic(
        "POST",
        f"/api/sessions/import/{query}",
        "\n".join(json.dumps(line) for line in _rehash(lines)).encode(),
        content_type="application/x-ndjson",
    )


def _data_of(kind: str, **change: Any) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        event = next(e for e in lines[1:] if e["type"] == kind)
        event["data"] = {**event["data"], **change}
        return lines

    return tamper


def _first(**change: Any) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[1].update(change)
        return lines

    return tamper


@pytest.mark.parametrize(
    "tamper",
    [
        _first(seq=True),
        _first(seq=1.0),
        _first(at="2026-11-30T10:00:00Z"),
        _first(id="evt_" + "x" * 70),
        lambda lines: [*lines[:2], {**lines[2], "id": lines[1]["id"]}, *lines[3:]],
        _data_of("message.updated", role="wizard"),
        _data_of("session.created", title="a\x00title"),
        _data_of("part.updated", type="file", mime="text/html", url="javascript:alert(1)"),
    ],
    ids=[
        "seq-true",
        "seq-float",
        "other-time-format",
        "long-id",
        "duplicate-event-id",
        "role",
        "nul-title",
        "js-url",
    ],
)
def test_an_import_that_verifies_but_is_not_canonical_is_refused(compacted, user, tmp_path, tamper):
    """Finding 8 of the reliability issue: such imports were accepted, and
    ``rebuild_projections --check`` then reported the sessions as different."""
    path = export(compacted, tmp_path)
    _write(path, _rehash(tamper(_lines(path))))
    sessions, events = Session.objects.count(), SessionEvent.objects.count()
    with pytest.raises(CommandError, match="log_integrity"):
        call_command("import_session", str(path), "--user", user.username)
    assert (Session.objects.count(), SessionEvent.objects.count()) == (sessions, events)
    call_command("rebuild_projections", "--check")


def test_api_import_with_copy(api, compacted):
    body = b"".join(api.get(f"/api/sessions/{compacted.pk}/export/").streaming_content)
    response = api.generic(
        "POST", "/api/sessions/import/?copy=1", body, content_type="application/x-ndjson"
    )
    assert response.status_code == 201, response.content
    assert response.json()["id"] != compacted.pk


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, lines: list[Any]) -> None:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")


def _broken_line(lines: list[Any]) -> list[Any]:
    return [*lines[:2], "{not json", *lines[2:]]


def _wrong_hash(lines: list[Any]) -> list[Any]:
    lines[2]["hash"] = "0" * 64
    return lines


def _version(lines: list[Any]) -> list[Any]:
    lines[0]["version"] = 99
    return lines


def _out_of_order(lines: list[Any]) -> list[Any]:
    lines[2], lines[3] = lines[3], lines[2]
    return lines


def _huge(lines: list[Any]) -> list[Any]:
    lines[2]["data"]["pad"] = "x" * 2048
    return lines


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_broken_line, "not JSON"),
        (_wrong_hash, "does not verify"),
        (lambda lines: lines[1:], "no header"),
        (_version, "unknown format version"),
        (_out_of_order, "out of order"),
        (_huge, "over the limit"),
        (lambda lines: lines[:-1], "announces"),
    ],
    ids=["broken-line", "wrong-hash", "no-header", "version", "order", "too-long", "truncated"],
)
def test_a_bad_export_file_is_refused_and_nothing_is_written(
    compacted, user, tmp_path, tamper, message, monkeypatch
):
    from sessions.services import imports

    monkeypatch.setattr(imports, "MAX_LINE_BYTES", 2000)
    path = export(compacted, tmp_path)
    _write(path, tamper(_lines(path)))
    sessions, events = Session.objects.count(), SessionEvent.objects.count()
    with pytest.raises(CommandError, match=message):
        call_command("import_session", str(path), "--user", user.username, "--copy")
    assert (Session.objects.count(), SessionEvent.objects.count()) == (sessions, events)


def test_replay_prints_the_request_at_a_seq(compacted, capsys):
    step = SessionEvent.objects.filter(session=compacted).latest("seq").seq
    call_command("replay_session", compacted.pk, "--at", str(step), "--json")
    body = json.loads(capsys.readouterr().out)
    assert body["at"] == step
    assert [m["content"] for m in body["messages"]] == contents(compacted)
    call_command("replay_session", compacted.pk, "--at", "3")
    assert "[user]\nquestion 0" in capsys.readouterr().out
    for bad in ("-1", str(step + 1)):
        with pytest.raises(CommandError, match="invalid_cursor"):
            call_command("replay_session", compacted.pk, "--at", bad)


def test_the_api_refuses_a_file_without_a_header(api, compacted):
    body = b"".join(api.get(f"/api/sessions/{compacted.pk}/export/").streaming_content)
    headless = b"\n".join(body.splitlines()[1:])
    count = SessionEvent.objects.count()
    response = api.generic(
        "POST", "/api/sessions/import/?copy=1", headless, content_type="application/x-ndjson"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "log_integrity"
    assert "no header" in response.json()["error"]["message"]
    assert SessionEvent.objects.count() == count


def test_context_at_beyond_the_log_is_400(api, compacted):
    head = selectors.head_seq(tenant=compacted.tenant, session_id=compacted.pk)
    response = api.get(f"/api/sessions/{compacted.pk}/context/?at={head + 1}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_cursor"
    assert api.get(f"/api/sessions/{compacted.pk}/context/?at=-1").status_code == 400


def _with_event(kind: str, data: dict[str, Any]) -> Any:
    """A new last event of ``kind``, the header counting it (rehashed after)."""

    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        last = lines[-1]
        lines.append(
            {
                "seq": last["seq"] + 1,
                "id": "evt_added",
                "session_id": last["session_id"],
                "type": kind,
                "at": last["at"],
                "data": data,
            }
        )
        lines[0]["events"] += 1
        return lines

    return tamper


def _pad(value: float) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[2]["data"]["pad"] = value  # json.dumps writes NaN / Infinity
        return lines

    return tamper


def _first_data(value: Any) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[1]["data"] = value
        return lines

    return tamper


def _first_without_data(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    del lines[1]["data"]
    return lines


def _event_type(value: Any) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[2]["type"] = value
        return lines

    return tamper


def _created_at(value: Any) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[1]["data"]["created_at"] = value
        return lines

    return tamper


def _created_title(value: str) -> Any:
    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lines[1]["data"]["title"] = value
        return lines

    return tamper


def _step_finish(**changes: Any) -> Any:
    """A step-finish part added to the first reply, with these token counts or cost."""

    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reply = next(line for line in lines[1:] if line["data"].get("role") == "assistant")
        tokens = {"input": 1, "output": 1}
        tokens.update({k: v for k, v in changes.items() if k != "cost"})
        step = {
            "id": "prt_forged",
            "message_id": reply["data"]["id"],
            "type": "step-finish",
            "reason": "stop",
            "snapshot": "",
            "tokens": tokens,
            "cost": changes.get("cost", 0),
        }
        return _with_event("part.updated", step)(lines)

    return tamper


def _deep_tool_input(levels: int) -> Any:
    """A tool part added to the first reply whose input nests ``levels`` objects."""
    deep: dict[str, Any] = {}
    for _ in range(levels - 1):
        deep = {"a": deep}
    return _tool_input(deep)


def _tool_input(given: dict[str, Any]) -> Any:
    """A tool part added to the first reply, with this input."""

    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        reply = next(line for line in lines[1:] if line["data"].get("role") == "assistant")
        tool = {
            "id": "prt_deep",
            "message_id": reply["data"]["id"],
            "type": "tool",
            "call_id": "c1",
            "tool": "read_file",
            "state": {"status": "pending", "input": given},
        }
        return _with_event("part.updated", tool)(lines)

    return tamper


def _part_removed_after_its_message(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last prompt removed (its parts with it), then one of its parts removed again:
    ``remove_part`` refuses that (404), so no log holds it."""
    session_id = lines[1]["session_id"]
    prompt = [e for e in lines[1:] if e["data"].get("role") == "user"][-1]["data"]["id"]
    part = next(e for e in lines[1:] if e["data"].get("message_id") == prompt)["data"]["id"]
    lines = _with_event("message.removed", {"session_id": session_id, "message_id": prompt})(lines)
    lines[-1]["id"] = "evt_removed"
    removal = {"session_id": session_id, "message_id": prompt, "part_id": part}
    return _with_event("part.removed", removal)(lines)


def _session_created_again(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _with_event("session.created", dict(lines[1]["data"]))(lines)


BAD_BLOCKS: list[tuple[str, dict[str, Any]]] = [
    ("blocks-null", {"blocks": None}),
    ("blocks-string", {"blocks": "x"}),
    ("block-number", {"blocks": [1]}),
    ("block-without-kind", {"blocks": [{"key": "agent", "text": "x"}]}),
    ("tools-string", {"blocks": [{"kind": "tools", "key": "agent", "tools": "nope"}]}),
    ("tools-numbers", {"blocks": [{"kind": "tools", "key": "agent", "tools": [1, 2]}]}),
    ("system-text-number", {"blocks": [{"kind": "system", "text": 123}]}),
    ("settings-temperature", {"blocks": [{"kind": "settings", "temperature": "hot"}]}),
    ("blocks-and-more", {"blocks": [], "extra": 1}),
]
BAD_MARKERS: list[tuple[str, dict[str, Any]]] = [
    ("marker-ids-not-ids", {"message_id": 5, "parent_id": [1]}),
    ("marker-empty", {}),
    ("marker-unknown-message", {"message_id": "msg_x", "parent_id": "msg_y"}),
]

MALFORMED = [
    ("seq-string", _first(seq="1"), False, "seq must be an integer"),
    ("seq-null", _first(seq=None), False, "seq must be an integer"),
    ("nan", _pad(float("nan")), False, "NaN is not a JSON value"),
    ("infinity", _pad(float("inf")), False, "Infinity is not a JSON value"),
    ("data-list", _first_data([1, 2]), True, "starts with its session.created"),
    ("data-string", _first_data("session"), True, "starts with its session.created"),
    # QA (HIGH): a 500 each (KeyError 'data'; TypeError: unhashable type 'dict').
    ("first-without-data", _first_without_data, True, "starts with its session.created"),
    ("type-object", _event_type({"a": 1}), True, "seq 2: unknown event type {'a': 1}"),
    ("type-list", _event_type(["x"]), True, "seq 2: unknown event type ['x']"),
    # QA (MEDIUM, SQLite): past a 64-bit key, the driver overflowed (a 500).
    ("user-id-2**63", _data_of("message.updated", user_id=2**63), True, "a user id"),
    ("user-id-10**20", _data_of("message.updated", user_id=10**20), True, "a user id"),
    ("created-at-integer", _created_at(1764547200), True, "seq 1"),
    # A third-round finding: 2**63 - 3001 tokens summed past the usage table's 64-bit
    # integers (a float in the report, every member's budget used up, rebuild_usage a
    # traceback); 10**30 was a 500.
    ("tokens-near-2**63", _step_finish(input=2**63 - 3001), True, "at most"),
    ("tokens-10**30", _step_finish(output=10**30), True, "at most"),
    ("cost-10**30", _step_finish(cost=1e30), True, "at most"),
    # A third-round finding: imported, then the admin's page of the session was a 500
    # for good (RecursionError decoding it under the admin's own stack).
    ("tool-input-900-deep", _deep_tool_input(900), True, "nested deeper"),
    # QA (HIGH on PostgreSQL): hashed as written, read back from jsonb otherwise.
    ("float-1e20", _tool_input({"n": 1e20}), True, "data.state.input.n is a number"),
    ("negative-zero", _tool_input({"z": [-0.0]}), True, "data.state.input.z[0] is a number"),
    # QA: JSON's "\ud800" decodes to a lone surrogate, which the hash cannot encode (500).
    (
        "lone-surrogate",
        _created_title("hi \ud800"),
        False,
        "seq 1: event.data.title holds a lone surrogate",
    ),
    (
        "nul-in-context-block",
        _with_event(
            "context.updated", {"blocks": [{"kind": "system", "key": "agent", "text": "a\x00b"}]}
        ),
        True,
        "NUL",
    ),
    # A second-round finding: each of these was imported (201), and the session's
    # context/, prompts, fork or compact answered 500 ever after.
    # QA (LOW): each was imported event by event and refused half-way by a write entry:
    # a 404 ``not_found`` ("no part …") and a 400 ``invalid_event``, not ``log_integrity``.
    ("part-removed-after-its-message", _part_removed_after_its_message, True, "no part"),
    ("session-created-twice", _session_created_again, True, "first event only"),
    *((name, _with_event("context.updated", data), True, "data") for name, data in BAD_BLOCKS),
    *((name, _with_event("session.compacted", data), True, "data") for name, data in BAD_MARKERS),
]


@pytest.mark.parametrize(
    ("tamper", "rehash", "message"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_a_malformed_log_is_400_log_integrity_never_a_500(api, compacted, tamper, rehash, message):
    """Issue 17 (LOW): each of these was a 500 (a TypeError, ValueError or
    AttributeError in the checks, or PostgreSQL's DataError for the NUL)."""
    body = b"".join(api.get(f"/api/sessions/{compacted.pk}/export/").streaming_content)
    lines = tamper([json.loads(line) for line in body.splitlines()])
    if rehash:
        lines = _rehash(lines)
    tampered = "\n".join(json.dumps(line) for line in lines).encode()
    before = (Session.objects.count(), SessionEvent.objects.count())
    response = api.generic(
        "POST", "/api/sessions/import/", tampered, content_type="application/x-ndjson"
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "log_integrity"
    assert message in response.json()["error"]["message"]
    assert (Session.objects.count(), SessionEvent.objects.count()) == before


def test_a_number_past_a_double_is_400_log_integrity(api, compacted):
    """QA (MEDIUM): ``1e400`` decodes to infinity, whose hash raised ``ValueError``: a 500
    (``NaN`` and ``Infinity`` were already refused)."""
    body = b"".join(api.get(f"/api/sessions/{compacted.pk}/export/").streaming_content)
    lines = body.splitlines()
    lines[2] = lines[2].replace(b'{"', b'{"pad":1e400,"', 1)
    before = (Session.objects.count(), SessionEvent.objects.count())
    response = api.generic(
        "POST", "/api/sessions/import/", b"\n".join(lines), content_type="application/x-ndjson"
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "log_integrity"
    assert "past a double's range" in response.json()["error"]["message"]
    assert (Session.objects.count(), SessionEvent.objects.count()) == before


@pytest.mark.postgres_only
def test_an_import_under_row_level_security_still_sees_ids_of_other_tenants(
    compacted, other_user, tmp_path, request
):
    """The database's keys are ``(id, tenant_id)`` (ready for Citus) and the serving role
    sees only its tenants' rows: ``forge_ids_taken`` still finds the id in another
    tenant, so the import is a copy, and nothing says where the id lives."""
    from accounts import tenancy
    from accounts.selectors import tenant_for_user

    events = services.parse_log(export(compacted, tmp_path).read_bytes().splitlines())
    request.getfixturevalue("as_app_role")  # from here on, as the serving role
    with tenancy.scope([tenant_for_user(other_user).pk]):
        assert not Session.objects.filter(pk=compacted.pk).exists()  # not visible
        imported = services.import_log(user=other_user, events=events)
        assert imported.pk != compacted.pk
        assert Session.objects.filter(pk=compacted.pk).count() == 0


def _spoken_by(session: Any, speaker: Any) -> None:
    """An exchange whose prompt and reply name ``speaker`` (as a turn of theirs would)."""
    prompt = services.update_message(
        session=session, info={"role": "user", "user_id": speaker.pk}
    ).data["id"]
    services.update_part(session=session, part={"message_id": prompt, "type": "text", "text": "q"})
    reply = services.update_message(
        session=session,
        info={"role": "assistant", "parent_id": prompt, "user_id": speaker.pk},
    ).data["id"]
    services.update_message(session=session, info={"id": reply, "completed_at": DONE})


def _speakers(session: Any) -> set[Any]:
    return {
        e.data.get("user_id")
        for e in SessionEvent.objects.filter(session=session, type="message.updated")
    } - {None}


def test_an_imported_copy_is_the_importers_and_kept_ids_need_member_speakers(
    session, user, tenant, other_user, tmp_path, capsys
):
    """Second-round findings: a log's messages name their speakers (``user_id``), and an
    import kept them: another tenant's user, a user of another server (ids are a
    database's own numbers), or a colleague, whose usage (and budget) every further
    copy charged again. A copy now names the importing user as every speaker; a log
    keeps its ids (and bytes) only when its speakers are members of the tenant. (An
    import now charges no one at all: its replies ran elsewhere,
    ``tests/usage/test_imported_usage.py``.)"""
    from accounts.models import Membership, User
    from forge.models import Usage

    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=tenant, user=carol)
    _spoken_by(session, other_user)
    _spoken_by(session, user)
    path = export(session, tmp_path)
    services.delete_session(session=session)  # its ids are free again
    call_command("import_session", str(path), "--user", user.username)
    imported = Session.objects.get(pk=capsys.readouterr().out.strip())
    assert imported.pk != session.pk  # a copy: a speaker is not a member
    assert _speakers(imported) == {user.pk}
    assert not Usage.objects.exists()

    path = export(imported, tmp_path)
    for _ in range(2):  # a colleague's copies are theirs, however many
        call_command("import_session", str(path), "--user", "carol", "--copy")
        copy = Session.objects.get(pk=capsys.readouterr().out.strip())
        assert _speakers(copy) == {carol.pk}
    assert not Usage.objects.exists()  # no one's usage, however many copies

    services.delete_session(session=imported)
    call_command("import_session", str(path), "--user", user.username)
    again = Session.objects.get(pk=capsys.readouterr().out.strip())
    assert again.pk == imported.pk  # every speaker a member: ids and bytes kept
    assert _speakers(again) == {user.pk}


def test_an_import_of_a_log_exported_mid_reply_ends_that_reply(session, user, tmp_path, capsys):
    """A second-round finding: the open reply of a log exported while it streamed stayed
    open in the import for ever (no process runs it there). It ends as interrupted in the
    import's transaction, keeping its text. The ending is the import's: it bills
    nothing, live or rebuilt (the reply ran elsewhere)."""
    from forge.models import Usage
    from forge.usage.services import rebuild_usage

    _exchange(session, 0)
    prompt = services.update_message(session=session, info={"role": "user"}).data["id"]
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": prompt}
    ).data["id"]
    services.update_part(
        session=session,
        part={"message_id": reply, "type": "text", "text": "half an ans", "time": {"start": DONE}},
    )
    path = export(session, tmp_path)
    call_command("import_session", str(path), "--user", user.username, "--copy")
    imported = Session.objects.get(pk=capsys.readouterr().out.strip())
    last = list(selectors.iter_history(tenant=imported.tenant, session_id=imported.pk))[-1]
    assert last["info"]["completed_at"] is not None
    assert last["info"]["error"]["name"] == "MessageAbortedError"
    assert last["parts"][0]["text"] == "half an ans"
    assert selectors.open_assistant_messages(tenant=imported.tenant, session=imported) == []
    assert not Usage.objects.filter(tenant=imported.tenant).exists()
    rebuild_usage(tenant=imported.tenant)
    assert not Usage.objects.filter(tenant=imported.tenant).exists()
    call_command("rebuild_projections", "--check")


def test_an_export_saved_with_a_byte_order_mark_imports(compacted, user, tmp_path, capsys):
    """Editors on Windows save UTF-8 with a BOM; it was "line 1 is not JSON"."""
    path = export(compacted, tmp_path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    call_command("import_session", str(path), "--user", user.username)
    imported = Session.objects.get(pk=capsys.readouterr().out.strip())
    assert contents(imported) == contents(compacted)


def test_a_fork_of_a_compacted_session_keeps_its_boundary(compacted):
    """QA (MEDIUM): fork renamed only ``parent_id``; the compaction part's
    ``tail_start_id`` still named the source's message, older than every copied one,
    so the fork's model input held the whole summarized history again. Forked before
    a new last message, the fork's input is the source's before that message."""
    head = selectors.head_seq(tenant=compacted.tenant, session_id=compacted.pk)
    expected = contents(compacted, at=head)
    assert not any("question 0" in text for text in expected)  # summarized away
    _exchange(compacted, 4)
    last = list(selectors.iter_history(tenant=compacted.tenant, session_id=compacted.pk))[-2]
    fork = services.fork_session(
        session=compacted, user=compacted.user, before_message_id=last["info"]["id"]
    )
    assert contents(fork) == expected


def test_a_fork_at_a_summary_leaves_out_its_compaction_request(compacted):
    """QA (MEDIUM): forked at a compaction's summary, the fork kept the compaction's
    request (a user message with a ``compaction`` part) without its summary: every
    request of the fork then sent the model "What did we do so far? Summarize …" as a
    prompt no one typed, before the fork's own. A compaction cut in two is left out,
    as it never happened: the fork's model sees the history before it."""
    from forge.context.messages import COMPACTION_PROMPT

    items = list(selectors.iter_history(tenant=compacted.tenant, session_id=compacted.pk))
    request_at = next(i for i, item in enumerate(items) if item["info"].get("summary")) - 1
    request_id = items[request_at]["info"]["id"]
    summary_id = items[request_at + 1]["info"]["id"]
    fork = services.fork_session(
        session=compacted, user=compacted.user, before_message_id=summary_id
    )
    fork_items = list(selectors.iter_history(tenant=fork.tenant, session_id=fork.pk))
    assert len(fork_items) == request_at
    assert not any(p["type"] == "compaction" for item in fork_items for p in item["parts"])
    seen = contents(fork)
    assert COMPACTION_PROMPT not in seen
    # What the source's model saw before the compaction was logged.
    compaction_from = min(
        e.seq
        for e in SessionEvent.objects.filter(session=compacted)
        if request_id in json.dumps(e.data)
    )
    assert seen == contents(compacted, at=compaction_from - 1)


def _header(**change: Any) -> Any:
    def tamper(lines: list[Any]) -> list[Any]:
        lines[0].update(change)
        return lines

    return tamper


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_header(version=True), "unknown format version"),
        (_header(version=1.0), "unknown format version"),
        (lambda lines: _header(events=float(len(lines) - 1))(lines), "announces"),
    ],
    ids=["version-true", "version-float", "events-float"],
)
def test_a_header_number_must_be_an_integer(compacted, user, tmp_path, tamper, message):
    """QA (LOW): the header was checked with ``!=``, and ``True == 1 == 1.0``, so
    ``"version": true`` and ``"events": 28.0`` were accepted."""
    path = export(compacted, tmp_path)
    _write(path, tamper(_lines(path)))
    before = (Session.objects.count(), SessionEvent.objects.count())
    with pytest.raises(CommandError, match=message):
        call_command("import_session", str(path), "--user", user.username, "--copy")
    assert (Session.objects.count(), SessionEvent.objects.count()) == before


def _removal(kind: str, **extra: Any) -> Any:
    """A new last event removing the newest part (or its message), as the services
    write it, plus ``extra``."""

    def tamper(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        part = next(e["data"] for e in reversed(lines[1:]) if e["type"] == "part.updated")
        data = {"session_id": part["session_id"], "message_id": part["message_id"]}
        if kind == "part.removed":
            data["part_id"] = part["id"]
        return _with_event(kind, {**data, **extra})(lines)

    return tamper


def _post_import(api: Any, compacted: Any, tamper: Any) -> Any:
    body = b"".join(api.get(f"/api/sessions/{compacted.pk}/export/").streaming_content)
    lines = _rehash(tamper([json.loads(line) for line in body.splitlines()]))
    tampered = "\n".join(json.dumps(line) for line in lines).encode()
    return api.generic(
        "POST", "/api/sessions/import/", tampered, content_type="application/x-ndjson"
    )


@pytest.mark.parametrize("kind", ["part.removed", "message.removed"])
def test_a_removal_with_extra_keys_is_not_canonical(api, compacted, kind):
    """QA (LOW): a removal's data was returned as given by the canonical check, so
    extra keys passed; as the services write it, it still imports."""
    before = (Session.objects.count(), SessionEvent.objects.count())
    response = _post_import(api, compacted, _removal(kind, extra=1))
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "log_integrity"
    assert (Session.objects.count(), SessionEvent.objects.count()) == before
    assert _post_import(api, compacted, _removal(kind)).status_code == 201


def test_an_import_naming_an_unknown_agent_is_refused(api, compacted):
    """QA (LOW): such an import was accepted, and every prompt to it then failed with
    400 unknown_agent. It is refused as PATCH refuses that agent, nothing written."""
    from forge.models import Agent

    def agent(name: str) -> Any:
        return _data_of("session.created", agent=name)

    before = (Session.objects.count(), SessionEvent.objects.count())
    response = _post_import(api, compacted, agent("ghost"))
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "unknown_agent"
    assert (Session.objects.count(), SessionEvent.objects.count()) == before
    Agent.objects.create(name="ghost")
    response = _post_import(api, compacted, agent("ghost"))
    assert response.status_code == 201, response.content
    assert Session.objects.get(pk=response.json()["id"]).agent == "ghost"


def _edit_an_event_by_hand(session: Any) -> int:
    """What an operator's hand-edit of the database does: an event's data changed under
    the append-only trigger (disabled for the edit, in the test's transaction)."""
    from django.db import connection

    event = SessionEvent.objects.filter(session=session, type="part.updated").order_by("seq")[0]
    table = SessionEvent._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = replica")  # no triggers
        else:
            cursor.execute("DROP TRIGGER forge_sessionevent_no_update")
        cursor.execute(f"UPDATE {table} SET type = 'part.removed' WHERE id = %s", [event.pk])
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL session_replication_role = origin")
    return event.seq


def test_exporting_a_log_that_does_not_verify_writes_it_and_fails(compacted, tmp_path, capsys):
    """A log edited by hand is exported as it is (the file is the evidence), and the
    command says where it breaks and exits non-zero: it exited 0 in silence, and
    import_session then refused the file."""
    seq = _edit_an_event_by_hand(compacted)
    path = tmp_path / "log.jsonl"
    with pytest.raises(CommandError, match=f"does not verify at seq {seq}"):
        call_command("export_session", compacted.pk, "-o", str(path))
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + SessionEvent.objects.filter(session=compacted).count()
    with pytest.raises(CommandError):  # to standard output, the same
        call_command("export_session", compacted.pk)
    assert len(capsys.readouterr().out.splitlines()) == len(lines)


@pytest.mark.django_db(transaction=True)  # committed: the command runs in its own process
def test_export_to_a_pipe_closed_early_is_no_traceback(compacted):
    """QA (LOW): ``export_session ID | head -1`` printed a ``BrokenPipeError`` traceback.
    A reader that stops early is not an error of the export: nothing on stderr."""
    import subprocess
    import sys

    from tests.live import server_env

    message = Message.objects.filter(session=compacted).order_by("id").first()
    assert message is not None
    for _ in range(8):  # past a pipe's buffer (64 KiB), so that writing meets the close
        services.update_part(
            session=compacted, part={"message_id": message.pk, "type": "text", "text": "x" * 50_000}
        )
    root = Path(__file__).resolve().parents[2]
    export = subprocess.Popen(
        [sys.executable, "manage.py", "export_session", compacted.pk],
        cwd=root,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert export.stdout is not None
    export.stdout.readline()  # the header, as head -1 reads it
    export.stdout.close()
    _, err = export.communicate(timeout=60)
    assert b"no session" not in err  # it read the test's database
    assert b"Traceback" not in err, err.decode()
    assert b"BrokenPipeError" not in err


@pytest.mark.django_db(transaction=True)  # committed: the command runs in its own process
def test_export_to_a_file_that_cannot_be_written_whole_leaves_the_file_as_it_was(
    compacted, tmp_path
):
    """QA (LOW): with the disk full (here: a 4 KB file-size limit) ``export_session -o`` left
    a truncated file at the target, and printed an "Exception ignored" traceback of the
    log's cursor after its error. The file is written beside the target and renamed into
    place once whole."""
    import resource
    import subprocess
    import sys

    from tests.live import server_env

    message = Message.objects.filter(session=compacted).order_by("id").first()
    assert message is not None
    services.update_part(
        session=compacted, part={"message_id": message.pk, "type": "text", "text": "x" * 20_000}
    )
    target = tmp_path / "log.jsonl"
    target.write_text("an earlier export\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    root = Path(__file__).resolve().parents[2]
    export = subprocess.run(
        [sys.executable, "manage.py", "export_session", compacted.pk, "-o", str(target)],
        cwd=root,
        env=server_env(),
        capture_output=True,
        preexec_fn=small_files,
        timeout=60,
        check=False,
    )
    err = export.stderr.decode()
    assert export.returncode == 1, err
    assert "cannot write" in err
    assert "Traceback" not in err
    assert "Exception ignored" not in err
    assert target.read_text() == "an earlier export\n"
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]  # nothing left beside it
    done = subprocess.run(
        [sys.executable, "manage.py", "export_session", compacted.pk, "-o", str(target)],
        cwd=root,
        env=server_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert target.read_text().startswith('{"')


def test_export_over_a_file_keeps_its_mode_follows_a_link_and_writes_a_descriptor_in_place(
    compacted, tmp_path
):
    """The whole-or-nothing write (a file beside the target, renamed) made an operator's
    0600 export 0644, replaced a link by a file (the file it pointed to kept its old
    export), and refused ``-o /proc/self/fd/N`` (QA)."""
    import os

    private = tmp_path / "private.jsonl"
    private.write_text("old\n")
    private.chmod(0o600)
    call_command("export_session", compacted.pk, "-o", str(private))
    assert private.stat().st_mode & 0o777 == 0o600
    assert private.read_text().startswith('{"')

    real = tmp_path / "real.jsonl"
    real.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    call_command("export_session", compacted.pk, "-o", str(link))
    assert link.is_symlink()
    assert real.read_text().startswith('{"')

    through = tmp_path / "through-fd.jsonl"
    with through.open("w") as opened:
        call_command("export_session", compacted.pk, "-o", f"/proc/self/fd/{opened.fileno()}")
    assert through.read_text().startswith('{"')
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.jsonl",
        "private.jsonl",
        "real.jsonl",
        "through-fd.jsonl",
    ]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".part")]


@pytest.mark.django_db(transaction=True)
def test_an_import_checks_its_log_before_its_transaction(compacted, user, monkeypatch):
    """QA (MEDIUM on SQLite): the hash chain and the canonical form were checked inside
    the import's transaction, whose ``BEGIN IMMEDIATE`` holds SQLite's one write lock:
    every tenant's writers waited through the checks of a large file too (some 5 s of
    a 32 MiB one's 13). They read nothing of the database, and run before it now."""
    from django.db import transaction

    from sessions.services import imports

    inside: list[bool] = []

    def watched(check: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            inside.append(transaction.get_connection().in_atomic_block)
            return check(*args, **kwargs)

        return run

    monkeypatch.setattr(imports, "verify_chain", watched(imports.verify_chain))
    monkeypatch.setattr(imports, "check_canonical", watched(imports.check_canonical))
    events = services.parse_log(list(selectors.export_lines(session=compacted)))
    copy = services.import_log(user=user, events=events, copy=True)
    assert inside == [False, False]
    assert copy.events.count() == len(events)
