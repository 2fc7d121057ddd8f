"""The session store: the append-only log and its projections.

``SessionEvent`` is the truth. ``Message`` and ``Part`` are projections of it,
upserted by id in the same transaction as the event that wrote them, and
rebuildable from the log (``rebuild_projections``). A projection row stores no
copy of its data: it points at the event that last wrote it (``session``,
``seq``), and its ``data`` is that event's, read through the join (every event
is immutable, so the pointer is as good as a copy, at none of the bytes). ``Session`` is the log's
anchor: tenant, owner, and projected metadata (title, agent). The log's head is
its newest event; nothing else stores it.

Every table carries the tenant.

Keys on PostgreSQL differ from Django's: each table's primary key is ``(id,
tenant_id)`` in the database (``(session_id, tenant_id)`` for a one-to-one row), and
the foreign keys between these tables are ``(column, tenant_id)``, so that the tables
can be distributed by ``tenant_id`` under Citus (``forge.db.citus``,
``forge/migrations/0008_citus_keys.py``). Django's pk stays ``id``: Django 5.2 cannot
point a ``ForeignKey`` at a composite primary key. SQLite keeps Django's keys.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, NoReturn

from django.conf import settings
from django.db import models

from .exceptions import AppendOnlyError
from .ids import new_session_id
from .log import format_time, now_ms

ID_LENGTH = 64


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=ID_LENGTH, default=new_session_id)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="sessions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="forge_sessions",
    )
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children"
    )
    title = models.CharField(max_length=255, blank=True, default="")
    agent = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=now_ms)
    # Last activity: the time of the newest session or message event (part
    # events, the bulk of a reply, leave the session row alone).
    updated_at = models.DateTimeField(default=now_ms)
    # Set by ``services.delete_session`` only: lets the database trigger allow
    # deleting this session's events, as part of deleting the whole session.
    deleting = models.BooleanField(default=False)
    # The id a client chose for this session as a chat (the AI SDK's ``useChat`` id):
    # unique within the tenant only, so a client's choice never collides with, nor
    # reveals, another tenant's. Not in the log: an alias of the API face, like the
    # owner and the tenant (an imported copy has none). NULL: no alias, which the
    # partial unique index leaves out.
    chat_alias = models.CharField(  # noqa: DJ001 - NULL, not "", is "no alias"
        max_length=ID_LENGTH, null=True, blank=True, editable=False
    )
    # The seq through which this session's log was copied here, not run here: an
    # import's events (with the import's own ending of the replies it left open) or a
    # fork's copies. Usage counts only what this server's model calls cost
    # (``forge.usage.fold``): nothing logged through this seq is billed, so an imported
    # step-finish that claims any number of tokens spends no budget. Beside the log,
    # not in it: an import keeps its events byte for byte. NULL: nothing was copied.
    copied_through = models.PositiveBigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        indexes = [models.Index(fields=["tenant", "-updated_at"], name="session_tenant_recent")]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "chat_alias"],
                condition=models.Q(chat_alias__isnull=False),
                name="session_tenant_chat_alias",
            )
        ]

    def __str__(self) -> str:
        return self.title or self.id


class HexDigestField(models.BinaryField):
    """A SHA-256 digest stored as its 32 raw bytes (``bytea`` / BLOB), read and written
    as the 64-character lowercase hex the log's wire form and hash chain use.

    Half the bytes of the hex text; the wire form (``verify_chain``, export files)
    never sees anything but hex."""

    _pyi_private_set_type: str  # django-stubs: what Python code reads and writes
    _pyi_private_get_type: str  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 32)
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> str | None:
        return digest_hex(value)

    def to_python(self, value: Any) -> Any:
        return digest_hex(value)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if isinstance(value, str):
            value = bytes.fromhex(value)
        return super().get_db_prep_value(value, connection, prepared)


def digest_hex(value: Any) -> str | None:
    """A stored digest (bytes, memoryview; hex text in rows written before migration
    0008) as hex."""
    if value is None or isinstance(value, str):
        return value
    return bytes(value).hex()


# What an event's data repeats of its own row, stored without it and put back by every
# read (:class:`EventDataField`): a message's or a part's ``session_id`` (the row's
# session), and a message's ``created_at`` when it is the row's ``at`` (the event that
# created the message, as a rule: both are the time of the write, to the millisecond).
OWN_SESSION_TYPES = ("message.updated", "part.updated")
OWN_SESSION_KEY = "session_id"
CREATED_TYPE = "message.updated"
CREATED_KEY = "created_at"
# The wire's time, as accounts.times.format_time writes it and wire_data_sql rebuilds it.
_WIRE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def row_held_keys(event_type: str, data: Any, session_id: Any, at_text: str | None) -> list[str]:
    """The keys of an event's wire ``data`` that its row holds and its stored form leaves
    out: ``session_id`` when it names the row's own session, a message's ``created_at``
    when it is the row's time ``at_text`` (wire format). Every message and part holds
    both keys (``shapes``; an import must be canonical), so a read puts back exactly
    what was left out."""
    if event_type not in OWN_SESSION_TYPES or not isinstance(data, dict):
        return []
    keys = []
    if OWN_SESSION_KEY in data and data[OWN_SESSION_KEY] == session_id:
        keys.append(OWN_SESSION_KEY)
    created = data.get(CREATED_KEY)
    if (
        event_type == CREATED_TYPE
        and at_text is not None
        and created == at_text
        and _WIRE_TIME.fullmatch(at_text)
    ):
        keys.append(CREATED_KEY)
    return keys


def _wire_time(at: Any) -> str | None:
    """An event's ``at`` as the wire writes it, when the database gives it back alike (an
    aware time to the millisecond); None otherwise (nothing is then left out)."""
    if isinstance(at, datetime) and at.tzinfo is not None and at.microsecond % 1000 == 0:
        return format_time(at)
    return None


def stored_data(event_type: str, data: Any, session_id: Any, at: Any) -> Any:
    """The stored form of an event's wire ``data`` (:func:`row_held_keys` left out)."""
    keys = row_held_keys(event_type, data, session_id, _wire_time(at))
    if not keys:
        return data
    return {k: v for k, v in data.items() if k not in keys}


def wire_data_sql(prefix: str, *, postgres: bool) -> str:
    """SQL for the wire form of the ``data`` column of the events table row ``prefix``
    names (``"od."``, ``'"forge_sessions_sessionevent".'``, or ``""``): the stored
    form with the row's ``session_id`` and, in a message, its ``at`` as ``created_at``
    put back where left out. A key that is there already (rows stored before migration
    0012, a data naming another session, a message created at another time) is kept
    as it is: ``json_insert`` / ``||`` with the stored data on the right never
    overwrite. Every reader of the column whole uses this (the ORM through
    :meth:`EventDataField.select_format`, the hand-written SQL of ``sessions.sql`` and
    ``selectors.log_from``), so they all see one key order."""
    data, session, kind, at = (f'{prefix}"{name}"' for name in ("data", "session_id", "type", "at"))
    if postgres:
        time = f"to_char({at} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        held = f"'{OWN_SESSION_KEY}', {session}, '{CREATED_KEY}', {time}"
        message = f"(jsonb_build_object({held}) || {data})"
        part = f"(jsonb_build_object('{OWN_SESSION_KEY}', {session}) || {data})"
    else:
        # strftime('%Y-%m-%dT%H:%M:%fZ', at), without a literal "%": the SQL passes through
        # Python's %-formatting (parameters; a debug cursor's last_executed_query).
        time = f"strftime(replace('~Y-~m-~dT~H:~M:~fZ', '~', char(37)), {at})"
        held = f"'$.{OWN_SESSION_KEY}', {session}, '$.{CREATED_KEY}', {time}"
        message = f"json_insert({data}, {held})"
        part = f"json_insert({data}, '$.{OWN_SESSION_KEY}', {session})"
    return (
        f"(CASE {kind} WHEN '{CREATED_TYPE}' THEN {message} "
        f"WHEN 'part.updated' THEN {part} ELSE {data} END)"
    )


class EventDataField(models.JSONField):
    """The event's ``data``: its wire form in Python, stored without what the row holds.

    The data of a ``message.updated`` or ``part.updated`` event is a message or part of
    the event's session, whose ``session_id`` is the row's own column, and a message's
    ``created_at`` is as a rule its first event's ``at``: the stored form leaves them
    out (:func:`row_held_keys`; 46 and 41 bytes) and every read puts them back in SQL
    (:func:`wire_data_sql`), so the wire form, which the hash chain covers,
    is what any reader sees (model instances, ``values()``, a projection's ``data``
    annotation, export, the incremental context). Rows stored with the key (before
    this) read the same.

    Only the selected column is rebuilt: a lookup (``data__session_id``,
    ``data__created_at``) sees the stored form, so none is made on those keys; raw SQL
    that reads ``data`` whole uses :func:`wire_data_sql`."""

    def pre_save(self, model_instance: Any, add: bool) -> Any:
        """The stored form (every ORM insert passes here, ``bulk_create`` too; the
        hand-written append stores :func:`stored_data` itself)."""
        value = super().pre_save(model_instance, add)
        return stored_data(
            getattr(model_instance, "type", ""),
            value,
            getattr(model_instance, "session_id", None),
            getattr(model_instance, "at", None),
        )

    def select_format(self, compiler: Any, sql: str, params: Any) -> tuple[str, Any]:
        sql, params = super().select_format(compiler, sql, params)
        column = f'"{self.column}"'
        if not sql.endswith(column):  # not the plain column: leave it
            return sql, params
        prefix = sql[: -len(column)]
        postgres = compiler.connection.vendor == "postgresql"
        return wire_data_sql(prefix, postgres=postgres), params


class SessionEventQuerySet(models.QuerySet["SessionEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("session events are append-only and cannot be updated")

    def delete(self) -> NoReturn:
        raise AppendOnlyError(
            "session events are append-only; delete the whole session "
            "(sessions.services.delete_session) to remove its log"
        )

    def bulk_update(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("session events are append-only and cannot be updated")

    def update_or_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError("session events are append-only and cannot be updated")


class SessionEvent(models.Model):
    """One entry of a session's log. Inserted once, never changed (ORM and database)."""

    id = models.CharField(primary_key=True, max_length=ID_LENGTH)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=32)
    at = models.DateTimeField()
    data = EventDataField()
    # sha256(previous event's hash + canonical JSON of this event's wire body), raw bytes;
    # hex in Python.
    hash = HexDigestField()

    objects = SessionEventQuerySet.as_manager()

    class Meta:
        constraints = [
            # With the tenant (a distributed table's unique keys hold its distribution
            # column: forge.db.citus); the leading (session, seq) serve the log's reads.
            models.UniqueConstraint(
                fields=["session", "seq", "tenant"], name="sessionevent_session_seq"
            )
        ]
        indexes = [
            # The model's context is folded from these few events every turn.
            models.Index(
                fields=["session", "seq"],
                condition=models.Q(type__in=["context.updated", "session.compacted"]),
                name="sessionevent_context",
            )
        ]
        ordering = ["session", "seq"]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AppendOnlyError("session events are append-only and cannot be updated")
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AppendOnlyError(
            "session events are append-only; delete the whole session to remove its log"
        )


class ProjectionManager(models.Manager[Any]):
    """Every query of a projection carries ``data``: the wire dict of the event that last
    wrote the row (a join on ``(session, seq)``, the log's unique index). So
    ``values_list("id", "data")``, ``filter(data__...)`` and ``row.data`` read as
    they did when the row held a copy, except a key of it inside ``values()`` /
    ``values_list()``: Django resolves no transform of an annotation there, so
    write ``values_list("event__data__key")``. A row cannot be created or updated
    with ``data`` (it is not a column): write through the services or
    ``sessions.services.rebuild_projection``."""

    def get_queryset(self) -> models.QuerySet[Any]:
        return super().get_queryset().annotate(data=models.F("event__data"))


def _event_pointer() -> models.ForeignObject[Any, Any]:
    """The event that last wrote a projection row: no column, a join on ``(session, seq)``."""
    return models.ForeignObject(
        SessionEvent,
        on_delete=models.DO_NOTHING,
        # With the tenant: the join is on the log's unique key, which holds it (and a
        # join of two distributed tables on their distribution column stays on one shard).
        from_fields=["session", "seq", "tenant"],
        to_fields=["session", "seq", "tenant"],
        related_name="+",
    )


class Message(models.Model):
    """Projection: a message envelope (a user turn or an assistant reply); ``data`` is
    the ``message.updated`` event at ``seq`` (see :class:`ProjectionManager`)."""

    id = models.CharField(primary_key=True, max_length=ID_LENGTH)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    role = models.CharField(max_length=16)
    # seq of the event that last wrote this row: its data is this row's.
    seq = models.PositiveBigIntegerField()
    event = _event_pointer()
    data: Any  # the event's, set by ProjectionManager's annotation (no column)

    objects = ProjectionManager()

    class Meta:
        indexes = [models.Index(fields=["session", "id"], name="message_session_id")]
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.role} {self.id}"


class Part(models.Model):
    """Projection: one piece of a message (text, reasoning, tool, …); ``data`` is the
    ``part.updated`` event at ``seq`` (see :class:`ProjectionManager`)."""

    id = models.CharField(primary_key=True, max_length=ID_LENGTH)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="parts", db_index=False
    )
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="parts", db_index=False
    )
    type = models.CharField(max_length=20)
    seq = models.PositiveBigIntegerField()
    event = _event_pointer()
    data: Any  # the event's, set by ProjectionManager's annotation (no column)

    objects = ProjectionManager()

    class Meta:
        indexes = [
            models.Index(fields=["message", "id"], name="part_message_id"),
            models.Index(fields=["session", "id"], name="part_session_id"),
        ]
        ordering = ["message", "id"]

    def __str__(self) -> str:
        return f"{self.type} {self.id}"


class ContextSnapshot(models.Model):
    """A cache, not a record: the model input a session's log derives to as of ``seq``
    (``hash``: that event's), encoded by ``forge.context.snapshot`` (``version``:
    its format). One row per session, the newest written (``sessions.snapshots``).

    Never trusted: a reader uses it only while ``(seq, hash)`` is still in the log
    (the hash chain makes the pair name the whole log up to ``seq``) and its version
    and checksum are the reader's, else derives from the log as if it did not exist.
    Nothing else reads it: export, import and fork do not carry it, deleting the
    session deletes it, ``rebuild_projections`` drops it."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    hash = HexDigestField()
    version = models.PositiveSmallIntegerField()
    state = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.session_id}@{self.seq} v{self.version}"


class CopiedMessage(models.Model):
    """What a message of a copy (a fork, an import's copy) was copied from: the copy's
    message ``message_id`` of session ``session`` is the message ``source_message_id``
    of session ``source_session_id``. A copy of a copy holds a row for each source up
    the chain (the fork of a fork maps back to the first source too).

    Written in the copy's transaction (``sessions.services.transfer.record_copies``),
    read by the runtime to cut from a copy's model view the turns the speaker's memory
    rolled in a source, whenever it rolled them (``forge.runtime.dialogue``). Beside
    the log, not in it, as ``Session.copied_through``: export and import do not carry
    it, ``rebuild_projections`` leaves it, deleting the copy deletes it. The source is
    named, not referenced: it may be deleted since, or another server's.

    Copies' ids are made in their originals' order, so within one source, the copy's
    order is the originals' (:func:`sessions.selectors.copy_through` relies on it)."""

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    message_id = models.CharField(max_length=ID_LENGTH)
    source_session_id = models.CharField(max_length=ID_LENGTH)
    source_message_id = models.CharField(max_length=ID_LENGTH)

    class Meta:
        indexes = [
            models.Index(
                fields=["session", "source_session_id", "source_message_id"],
                name="copiedmessage_source",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.message_id} <- {self.source_message_id}"
