"""An exported log read back: parsed, verified, checked canonical, and imported keeping
its ids or as a copy (``transfer``: the copies' id renaming and batched writes)."""

from __future__ import annotations

import json
import math
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction

from accounts.exceptions import ForgeError, NoTenant
from accounts.selectors import members_of, tenant_for_user

from ..exceptions import LogIntegrityError, SessionMismatch
from ..free_shapes import check_free_event
from ..ids import is_valid_id, new_message_id, new_part_id
from ..log import (
    LOG_FORMAT,
    LOG_VERSION,
    format_time,
    parse_time,
    verify_chain,
)
from ..models import Message, Part, Session, SessionEvent
from ..projector import with_rolled_through_moved
from ..shapes import (
    MAX_DEPTH,
    ShapeError,
    normalize_message,
    normalize_part,
    too_deep,
    v_time,
)
from ..signals import history_copied, session_imported
from ..storable import nul_path, surrogate_path, unstored_number
from .session import clean_agent, clean_title, create_session, update_session
from .transfer import (
    CopyWriter,
    carried,
    mark_copied,
    rebuild_projection,
    record_copies,
    remap_ids,
    undone_on_failure,
)
from .writes import AppendEvent, RemoveMessage, RemovePart, UpdateMessage, UpdatePart

MAX_LINE_BYTES = 16 * 1024 * 1024  # one event of an export file, at most


def parse_log(lines: Any, *, max_line_bytes: int | None = None) -> list[dict[str, Any]]:
    """The events of an export file (JSON Lines: a header, then the events in order).

    Raises ``LogIntegrityError`` for a broken line, a line over ``max_line_bytes``,
    a missing header or an unknown format version, events out of order, or a
    header that does not match the events (count, head hash). The hash chain is
    verified by :func:`import_log`.
    """
    max_line_bytes = max_line_bytes or MAX_LINE_BYTES
    header: dict[str, Any] | None = None
    events: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        size = len(line) if isinstance(line, bytes) else len(str(line).encode())
        if size > max_line_bytes:
            raise LogIntegrityError(f"line {number} is over the limit of {max_line_bytes} bytes")
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                raise LogIntegrityError(f"line {number} is not UTF-8") from None
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]  # a byte order mark, as editors on Windows save UTF-8
        if not line.strip():
            continue
        try:
            event = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
        except RecursionError:
            raise LogIntegrityError(f"line {number} is nested too deeply") from None
        except ValueError as exc:
            raise LogIntegrityError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(event, dict):
            raise LogIntegrityError(f"line {number} is not an event object")
        if header is None:
            if event.get("format") != LOG_FORMAT:
                raise LogIntegrityError(
                    f"line {number}: the file has no header (a first line with "
                    f'"format": "{LOG_FORMAT}")'
                )
            if not _same_int(event.get("version"), LOG_VERSION):
                raise LogIntegrityError(
                    f"unknown format version {event.get('version')!r}; this server reads "
                    f"version {LOG_VERSION}"
                )
            header = event
            continue
        if type(event.get("seq")) is not int:
            raise LogIntegrityError(
                f"line {number}: seq must be an integer, not {event.get('seq')!r:.40}"
            )
        if events and event["seq"] != events[-1]["seq"] + 1:
            raise LogIntegrityError(
                f"line {number}: events out of order (seq {event.get('seq')!r} after "
                f"{events[-1].get('seq')!r})"
            )
        events.append(event)
    if header is None:
        raise LogIntegrityError("the file is empty: no header, no events")
    if not _same_int(header.get("events"), len(events)):
        raise LogIntegrityError(
            f"the header announces {header.get('events')!r} events; the file holds {len(events)}"
        )
    if events and header.get("head_hash") != events[-1].get("hash"):
        raise LogIntegrityError("the header's head_hash is not the hash of the last event")
    if events and header.get("session_id") != events[0].get("session_id"):
        raise LogIntegrityError("the header names another session than its events")
    return events


def _same_int(value: Any, expected: int) -> bool:
    """``value`` is the integer ``expected``: not ``true``, not ``1.0`` (which ``==``
    takes for 1, so such a header was read as version 1)."""
    return type(value) is int and value == expected


def _no_constant(name: str) -> Any:
    """JSON has no ``NaN``, ``Infinity`` or ``-Infinity`` (Python's decoder takes them)."""
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    """A JSON number as a float, refused past a double's range: Python reads ``1e400``
    as infinity, which no event can hold (its hash raised ``ValueError``: a 500; QA)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text:.40} is past a double's range")
    return value


def import_log(
    *, user: AbstractBaseUser, events: list[dict[str, Any]], copy: bool = False
) -> Session:
    """Recreate a session from its exported log, after verifying it, in the user's tenant.

    The log must verify (sequence, hash chain) and be canonical
    (:func:`check_canonical`). When its ids are all free in the whole database
    the session keeps them and its events stay byte for byte what they were;
    otherwise, and always with ``copy``, it is imported as a copy
    (:func:`_import_copy`: new ids and a new chain). Whether an id exists in
    another tenant is never told.

    Nothing it logs is billed (``transfer.mark_copied``): the replies ran elsewhere,
    and their usage is whatever the file claims.

    The checks read nothing of the database and run before its transaction: on SQLite
    that transaction holds the one write lock, which every tenant's writers wait for
    (QA: a 32 MiB file held it some 5 s longer for its checks alone).
    """
    if not events:
        raise LogIntegrityError("the log is empty")
    session_id = events[0].get("session_id")
    if not is_valid_id(session_id):
        raise LogIntegrityError("the first event names no session")
    # Hashing encodes each event recursively: one nested past what any shape takes (a
    # part's ``MAX_DEPTH`` and the few levels of the event around it) is
    # refused first, in the words the shapes use (a 900-deep tool input was hashed at
    # the edge of Python's recursion limit: a 500 once the request's stack grew).
    for event in events:
        if too_deep(event.get("data"), MAX_DEPTH + 16):
            raise LogIntegrityError(
                f"seq {event.get('seq')!r}: nested deeper than {MAX_DEPTH} levels"
            )
    try:
        problems = verify_chain(events, session_id=session_id)
    except UnicodeEncodeError:  # JSON's "\ud800" decodes to what no UTF-8 text holds
        where = next(
            (
                f"seq {e.get('seq')!r}: {found}"
                for e in events
                if (found := surrogate_path(e, "event"))
            ),
            "an event",
        )
        raise LogIntegrityError(
            f"{where} holds a lone surrogate (U+D800-U+DFFF), which the log does not store"
        ) from None
    if problems:
        raise LogIntegrityError(
            f"the log does not verify at seq {problems[0].seq}: {problems[0].message}"
        )
    first = events[0]
    if (
        first.get("type") != "session.created"
        or not isinstance(first.get("data"), dict)
        or first["data"].get("id") != session_id
    ):
        raise LogIntegrityError("a log starts with its session.created event")
    check_canonical(events)
    with transaction.atomic():
        session = _import(user=user, events=events, copy=copy)
        with undone_on_failure(session):  # a receiver refusing it (an unknown agent)
            session_imported.send(sender=Session, session=session)
        # After the receivers: their writes (the ending of replies the log left open)
        # are the import's too, and bill nothing.
        mark_copied(session=session)
    return session


def _import(*, user: AbstractBaseUser, events: list[dict[str, Any]], copy: bool) -> Session:
    strangers = _strangers(user=user, events=events)
    if copy or strangers or _ids_taken(events):
        return _import_copy(user=user, events=events)
    try:
        with transaction.atomic():  # a savepoint: a taken id undoes only this attempt
            return _import_keeping_ids(user=user, events=events)
    except IntegrityError:
        # An id of this log is taken, perhaps in another tenant: import a copy with
        # new ids rather than say so (ids are kept only when free in the database).
        return _import_copy(user=user, events=events)


def _strangers(*, user: AbstractBaseUser, events: list[dict[str, Any]]) -> set[int]:
    """The speakers of the log (its messages' ``user_id``) who are not members of the
    importing user's tenant: another tenant's users, users of another server (a user id
    is a database's own number), deleted ones. Memory and usage go by the speaker, so
    such a log is imported as a copy, whose speakers are the importing user."""
    speakers = {
        e["data"]["user_id"]
        for e in events
        if e["type"] == "message.updated" and "user_id" in e["data"]
    }
    if not speakers:
        return set()
    try:
        tenant = tenant_for_user(user)
    except NoTenant as exc:
        raise SessionMismatch(str(exc)) from exc
    members = members_of([tenant.pk]).filter(pk__in=speakers).values_list("pk", flat=True)
    return speakers - set(members)


def _ids_taken(events: list[dict[str, Any]]) -> bool:
    """Whether an id of the log (its session's, an event's, a message's, a part's) is
    used already, in any tenant. The database's keys no longer say it on PostgreSQL
    (they are ``(id, tenant_id)``: ready for Citus), and row-level security hides other
    tenants' rows from a query, so PostgreSQL asks ``forge_ids_taken`` (migration 0013),
    which sees every tenant and answers only yes or no. SQLite's keys are still ``id``,
    and a taken id also fails the insert there."""
    session_id = events[0]["session_id"]
    ids: dict[str, set[str]] = {"message.updated": set(), "part.updated": set()}
    for event in events:
        if event["type"] in ids:
            ids[event["type"]].add(event["data"]["id"])
    event_ids = sorted({e["id"] for e in events})
    messages, parts = sorted(ids["message.updated"]), sorted(ids["part.updated"])
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT forge_ids_taken(%s, %s, %s, %s)", [session_id, event_ids, messages, parts]
            )
            return bool(cursor.fetchone()[0])
    return (
        Session.objects.filter(pk=session_id).exists()
        or SessionEvent.objects.filter(pk__in=event_ids).exists()
        or Message.objects.filter(pk__in=messages).exists()
        or Part.objects.filter(pk__in=parts).exists()
    )


def _import_keeping_ids(*, user: AbstractBaseUser, events: list[dict[str, Any]]) -> Session:
    """The log as it is: the session keeps its id and its events stay byte for byte what
    they were (the chain still verifies); messages and parts are rebuilt from them.
    Raises ``IntegrityError`` when any of its ids is taken."""
    try:
        tenant = tenant_for_user(user)
    except NoTenant as exc:
        raise SessionMismatch(str(exc)) from exc
    first, session_id = events[0], events[0]["session_id"]
    info = first["data"]
    session = Session.objects.create(
        id=session_id,
        tenant=tenant,
        user_id=user.pk,
        title=clean_title(info.get("title") or ""),
        agent=clean_agent(info.get("agent")),
        created_at=parse_time(info["created_at"]),
        updated_at=parse_time(events[-1]["at"]),
    )
    SessionEvent.objects.bulk_create(
        [
            SessionEvent(
                id=e["id"],
                tenant=tenant,
                session=session,
                seq=e["seq"],
                type=e["type"],
                at=parse_time(e["at"]),
                data=e["data"],
                hash=e["hash"],
            )
            for e in events
        ],
        batch_size=500,
    )
    rebuild_projection(session=session)
    return session


EVENT_KEYS = frozenset({"seq", "id", "session_id", "type", "at", "data", "hash"})


def check_canonical(events: list[dict[str, Any]]) -> None:
    """Every event exactly as this server's write entries would have written it, or
    ``LogIntegrityError`` naming the first that is not.

    A log whose hashes verify can still hold what no write entry accepts (``seq:
    true``, a time in another format, an unknown role, a ``javascript:`` file URL,
    a control character in a title, a NUL anywhere); imported as it is, its
    projection would differ from its events, or the database would refuse it. So
    each event's data is normalized again, as the services do, against the state
    the log built so far, and must come out unchanged.
    """
    session_id = events[0]["session_id"]
    messages: dict[str, dict[str, Any]] = {}
    parts: dict[str, dict[str, Any]] = {}
    event_ids: set[Any] = set()
    for index, event in enumerate(events):
        seq = event.get("seq")
        where = f"seq {seq!r}"
        try:
            if set(event) != EVENT_KEYS:
                raise ValueError(f"an event has exactly the keys {sorted(EVENT_KEYS)}")
            if type(seq) is not int or not is_valid_id(event["id"]):
                raise ValueError("seq must be an integer and id an id")
            if event["id"] in event_ids:
                raise ValueError(f"event id {event['id']!r} appears twice")
            event_ids.add(event["id"])
            at = event["at"]
            if not isinstance(at, str) or format_time(parse_time(at)) != at:
                raise ValueError(f"at must be a time as this server writes it, not {at!r:.40}")
            data = event["data"]
            if not isinstance(data, dict):
                raise ValueError("data must be an object")
            if index and event["type"] == "session.created":  # no write entry logs another
                raise ValueError("session.created is the log's first event only")
            nul = nul_path(event, "event")
            if nul is not None:  # the log stores none (services.append), on any stack
                raise ValueError(f"{nul} holds a NUL character (U+0000)")
            canonical = _canonical(event["type"], data, session_id, messages, parts)
            number = unstored_number(data)
            if number is not None:  # the log writes it as it reads back (services.append)
                raise ValueError(
                    f"{number} is a number this server writes otherwise (from 1e16 as an "
                    "integer, -0.0 as 0.0)"
                )
        except (
            ValueError,
            LookupError,
            TypeError,
            AttributeError,
            RecursionError,
            ShapeError,
            ForgeError,
        ) as exc:
            raise LogIntegrityError(f"{where}: not as this server writes it: {exc}") from None
        if canonical != data:
            raise LogIntegrityError(f"{where}: the event's data is not in its canonical form")


def _canonical(
    kind: str,
    data: dict[str, Any],
    session_id: str,
    messages: dict[str, dict[str, Any]],
    parts: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    if kind in ("session.created", "session.updated"):
        if data.get("id") != session_id:
            raise ValueError("the session's own id")
        clean_title(data.get("title") or "")
        clean_agent(data.get("agent"))
        if v_time("data.created_at", data["created_at"]) != data["created_at"]:
            raise ValueError("created_at must be a time as this server writes it")
        return data
    if kind == "message.updated":
        message = normalize_message(data, session_id=session_id, existing=messages.get(data["id"]))
        parent = message.get("parent_id")
        if parent is not None and parent not in messages:
            raise ValueError(f"no message {parent!r} before it")
        messages[message["id"]] = message
        return message
    if kind == "part.updated":
        part = normalize_part(data, session_id=session_id, existing=parts.get(data["id"]))
        if part["message_id"] not in messages:
            raise ValueError(f"no message {part['message_id']!r} before it")
        parts[part["id"]] = part
        return part
    # The removals exactly as ``remove_message`` / ``remove_part`` write them: their data
    # was returned as given, so one with extra keys passed (and was logged with them).
    if kind == "message.removed":
        messages.pop(data["message_id"])
        for part_id in [k for k, p in parts.items() if p["message_id"] == data["message_id"]]:
            del parts[part_id]  # removed with their message, as ``remove_message`` does
        return {"session_id": session_id, "message_id": data["message_id"]}
    if kind == "part.removed":
        if data["part_id"] not in parts:
            raise ValueError(f"no part {data['part_id']!r} before it")
        part = parts.pop(data["part_id"])
        return {
            "session_id": session_id,
            "message_id": part["message_id"],
            "part_id": data["part_id"],
        }
    check_free_event(kind, data)  # session.compacted, context.updated
    if kind == "session.compacted":
        for field in ("message_id", "parent_id"):
            if data[field] not in messages:
                raise ValueError(f"data.{field}: no message {data[field]!r} before it")
    return data


def _import_copy(*, user: AbstractBaseUser, events: list[dict[str, Any]]) -> Session:
    """A copy of a verified log: the session, its messages and parts get new ids (in the
    same order as the originals, so every id comparison still holds) and the events
    are appended anew, so the copy has its own chain; its ``session.created`` records
    the source's id, head seq and head hash. The copy is the importing user's: every
    message names them as its speaker (``user_id``), so that its memory and its usage
    are theirs, never those of whoever spoke in the source (a copy imported again and
    again would otherwise spend that person's budget)."""
    source = events[0]["data"]
    message_ids = sorted(
        {e["data"]["id"] for e in events if e["type"] == "message.updated"}
        | {e["data"]["message_id"] for e in events if e["type"] == "message.removed"}
    )
    part_ids = sorted(
        {e["data"]["id"] for e in events if e["type"] == "part.updated"}
        | {e["data"]["part_id"] for e in events if e["type"] == "part.removed"}
    )
    new_ids = {old: new_message_id() for old in message_ids}
    message_new_ids = dict(new_ids)  # in creation order, as ``message_ids`` is sorted
    new_ids.update({old: new_part_id() for old in part_ids})
    session = create_session(
        user=user,
        title=clean_title(source.get("title") or ""),
        agent=clean_agent(source.get("agent")) or None,
        copied_from={
            "session_id": events[0]["session_id"],
            "head_seq": events[-1]["seq"],
            "head_hash": events[-1]["hash"],
        },
    )

    with undone_on_failure(session):
        _copy_events(session, events, user=user, new_ids=new_ids, message_new_ids=message_new_ids)
        record_copies(copy=session, source_id=events[0]["session_id"], new_ids=message_new_ids)
        history_copied.send(
            sender=Session,
            source_id=events[0]["session_id"],
            copy=session,
            new_ids=message_new_ids,
        )
    return session


def _copy_events(
    session: Session,
    events: list[dict[str, Any]],
    *,
    user: AbstractBaseUser,
    new_ids: dict[str, str],
    message_new_ids: dict[str, str],
) -> None:
    writes = CopyWriter(session)
    files: set[Any] = set()  # the stored files carried (``transfer.carried``)
    for event in events[1:]:
        kind, data = event["type"], remap_ids(event["data"], new_ids)
        data["session_id"] = session.pk
        if "user_id" in data:
            data["user_id"] = user.pk
        if kind == "session.updated":
            writes.flush()
            update_session(session=session, title=data.get("title") or "", agent=data.get("agent"))
        elif kind == "message.updated":
            writes.add(UpdateMessage(info=data))
        elif kind == "part.updated":
            writes.add(UpdatePart(part=carried(data, session, files)))
        elif kind == "message.removed":
            writes.add(RemoveMessage(message_id=data["message_id"]))
        elif kind == "part.removed":
            writes.add(RemovePart(part_id=data["part_id"]))
        else:  # session.compacted, context.updated
            data.pop("session_id")
            if kind == "context.updated":
                data["blocks"] = with_rolled_through_moved(data["blocks"], message_new_ids)
            writes.add(AppendEvent(type=kind, data=data))
    writes.flush()
