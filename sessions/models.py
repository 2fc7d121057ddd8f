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
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.conf import settings
from django.db import models

from .exceptions import AppendOnlyError
from .ids import new_session_id
from .log import now_ms

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


# The event types whose data is a message or a part of the event's own session: their
# stored data leaves out ``session_id`` when it is the row's own column, and every read
# puts it back (:class:`EventDataField`).
OWN_SESSION_TYPES = ("message.updated", "part.updated")
OWN_SESSION_KEY = "session_id"


def stored_data(event_type: str, data: Any, session_id: Any) -> Any:
    """The stored form of an event's wire ``data``: without ``session_id`` when it is a
    message's or a part's and names the row's own session (the row's column holds it)."""
    if (
        event_type in OWN_SESSION_TYPES
        and isinstance(data, dict)
        and OWN_SESSION_KEY in data
        and data[OWN_SESSION_KEY] == session_id
    ):
        return {k: v for k, v in data.items() if k != OWN_SESSION_KEY}
    return data


def wire_data_sql(prefix: str, *, postgres: bool) -> str:
    """SQL for the wire form of the ``data`` column of the events table row ``prefix``
    names (``"od."``, ``'"forge_sessions_sessionevent".'``, or ``""``): the stored
    form with the row's ``session_id`` put back where it was left out. A key that is
    there already (rows stored before migration 0012, or a data naming another
    session) is kept as it is: ``json_insert`` / ``||`` with the stored data on the
    right never overwrite. Every reader of the column whole uses this (the ORM
    through :meth:`EventDataField.select_format`, the hand-written SQL of
    ``sessions.sql`` and ``selectors.log_from``), so they all see one key order."""
    data, session, kind = (f'{prefix}"{name}"' for name in ("data", "session_id", "type"))
    if postgres:
        rebuilt = f"(jsonb_build_object('{OWN_SESSION_KEY}', {session}) || {data})"
    else:
        rebuilt = f"json_insert({data}, '$.{OWN_SESSION_KEY}', {session})"
    types = ", ".join(f"'{t}'" for t in OWN_SESSION_TYPES)
    return f"(CASE WHEN {kind} IN ({types}) THEN {rebuilt} ELSE {data} END)"


class EventDataField(models.JSONField):
    """The event's ``data``: its wire form in Python, stored without what the row holds.

    The data of a ``message.updated`` or ``part.updated`` event is a message or part of
    the event's session, whose ``session_id`` is the row's own column: it is stored
    without that key (:func:`stored_data`; 46 bytes an event) and every read puts it
    back in SQL (:func:`wire_data_sql`), so the wire form, which the hash chain covers,
    is what any reader sees (model instances, ``values()``, a projection's ``data``
    annotation, export, the incremental context). Rows stored with the key (before
    this) read the same.

    Only the selected column is rebuilt: a lookup (``data__session_id``) sees the
    stored form, so none is made on that key; raw SQL that reads ``data`` whole
    uses :func:`wire_data_sql`."""

    def pre_save(self, model_instance: Any, add: bool) -> Any:
        """The stored form (every ORM insert passes here, ``bulk_create`` too; the
        hand-written append stores :func:`stored_data` itself)."""
        value = super().pre_save(model_instance, add)
        return stored_data(
            getattr(model_instance, "type", ""), value, getattr(model_instance, "session_id", None)
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
            models.UniqueConstraint(fields=["session", "seq"], name="sessionevent_session_seq")
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
        from_fields=["session", "seq"],
        to_fields=["session", "seq"],
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
