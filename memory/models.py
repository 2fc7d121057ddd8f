"""The memory store: MemoryCore → MemoryUnit → MemorySlice, and the dialogue window.

* ``MemoryCore``: one per (tenant, user, agent). Holds the current
  ``memory_session_id`` and the bookkeeping of its dialogue window.
* ``DialogueMessage``: the dialogue window, one row per message, numbered by a
  per-core ``seq``. Appending is an INSERT; rolling deletes a prefix.
* ``MemoryUnit``: the dialogue of one memory session. Its messages are
  ``MemoryMessage`` rows numbered by ``index`` (0, 1, 2 …), its summaries are
  ``MemorySlice`` rows, each covering ``[start_index, end_index)`` of them.

Nothing grows a JSON array: appending to a window or a unit, and rolling,
cost the same whatever a core's history holds. Every table carries the tenant.

Keys on PostgreSQL differ from Django's: each table's primary key is ``(id,
tenant_id)`` in the database (``(session_id, tenant_id)`` for a one-to-one row), and
the foreign keys between these tables are ``(column, tenant_id)``, so that the tables
can be distributed by ``tenant_id`` under Citus (``forge.db.citus``,
``forge/migrations/0008_citus_keys.py``). Django's pk stays ``id``: Django 5.2 cannot
point a ``ForeignKey`` at a composite primary key. SQLite keeps Django's keys.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .ids import ID_MAX, new_core_id, new_memory_session_id, new_slice_id, new_unit_id
from .times import now_ms

AGENT_MAX = 64
ROLE_MAX = 16


class Role(models.TextChoices):
    USER = "user", "user"
    ASSISTANT = "assistant", "assistant"
    SYSTEM = "system", "system"
    TOOL = "tool", "tool"
    REASONING = "reasoning", "reasoning"


class MemoryCore(models.Model):
    """The memory of one user with one agent, in one tenant.

    Window bookkeeping: messages get ``seq`` = ``window_next_seq`` when appended;
    messages with ``seq < rolled_seq`` are in a unit and have left the window, so
    the window holds exactly the messages no unit holds yet
    (``rolled_seq == window_next_seq - window_count``; a core rolled before that
    rule may still hold a few rolled ones below ``rolled_seq`` until its next
    rolling); ``window_count`` is how many messages the window holds.
    """

    id = models.CharField(primary_key=True, max_length=ID_MAX, default=new_core_id)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="memory_cores"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_cores"
    )
    agent = models.CharField(max_length=AGENT_MAX)
    memory_session_id = models.CharField(max_length=ID_MAX, default=new_memory_session_id)
    created_at = models.DateTimeField(default=now_ms)
    last_interaction_at = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)
    window_next_seq = models.PositiveBigIntegerField(default=0)
    rolled_seq = models.PositiveBigIntegerField(default=0)
    rolled_at = models.DateTimeField(null=True, blank=True)
    # The history digest (``memory.digest``): the summaries of the slices that the
    # ``dialog_history`` block has no room for, condensed into one text, so that the
    # block still stands for every rolled turn. The slices it covers are ``digested``;
    # ``history_digest_at`` is the newest one's time. None before the block overflows
    # (nullable, so that SQLite adds the column in place: migration 0009).
    history_digest = models.TextField(null=True, blank=True)  # noqa: DJ001
    history_digest_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "agent"], name="memorycore_tenant_user_agent"
            ),
            models.CheckConstraint(
                condition=models.Q(rolled_seq__lte=models.F("window_next_seq")),
                name="memorycore_rolled_within_window",
            ),
        ]
        indexes = [
            # The sweep's two candidate queries: over the threshold, or idle.
            models.Index(
                fields=["window_count"],
                condition=models.Q(window_count__gt=0),
                name="memorycore_window",
            ),
            models.Index(
                fields=["last_interaction_at"],
                condition=models.Q(window_count__gt=0),
                name="memorycore_idle",
            ),
        ]
        verbose_name = "memory core"

    def __str__(self) -> str:
        return f"{self.agent} / {self.user_id} ({self.id})"


class _Message(models.Model):
    """What a message of the window and of a unit both are: who said what, when, and
    which session message it came from."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="+", db_index=False
    )
    role = models.CharField(max_length=ROLE_MAX, choices=Role.choices)
    text = models.TextField(blank=True)
    at = models.DateTimeField()
    session_id = models.CharField(max_length=ID_MAX, blank=True, default="")
    message_id = models.CharField(max_length=ID_MAX, blank=True, default="")

    class Meta:
        abstract = True


class DialogueMessage(_Message):
    """One message of a core's dialogue window (not yet rolled, or kept for context)."""

    core = models.ForeignKey(
        MemoryCore, on_delete=models.CASCADE, related_name="window", db_index=False
    )
    seq = models.PositiveBigIntegerField()

    class Meta:
        constraints = [
            # With the tenant: a distributed table's unique keys hold its distribution
            # column (forge.db.citus); leading (core, seq) still serve the window's reads.
            models.UniqueConstraint(
                fields=["core", "seq", "tenant"], name="dialoguemessage_core_seq"
            )
        ]
        ordering = ["core", "seq"]
        verbose_name = "dialogue window message"

    def __str__(self) -> str:
        return f"{self.core_id}#{self.seq} {self.role}"


class MemoryUnit(models.Model):
    """The dialogue of one memory session of a core, with its summary slices."""

    id = models.CharField(primary_key=True, max_length=ID_MAX, default=new_unit_id)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    core = models.ForeignKey(
        MemoryCore, on_delete=models.CASCADE, related_name="units", db_index=False
    )
    memory_session_id = models.CharField(max_length=ID_MAX)
    created_at = models.DateTimeField(default=now_ms)
    updated_at = models.DateTimeField(default=now_ms)
    message_count = models.PositiveIntegerField(default=0)
    slice_count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["core", "memory_session_id", "tenant"], name="memoryunit_core_session"
            )
        ]
        indexes = [models.Index(fields=["core", "updated_at"], name="memoryunit_core_updated")]
        ordering = ["core", "id"]
        verbose_name = "memory unit"

    def __str__(self) -> str:
        return self.id


class MemoryMessage(_Message):
    """Message ``index`` of a unit's ``conversation_messages`` (0-based, no gaps).

    Its ``tenant`` and ``unit`` are foreign keys the database does not check
    (``db_constraint=False``, migration 0007): a rolling writes ~16 of these rows,
    and their two deferred checks each were half of its PostgreSQL ``COMMIT``
    (docs/memory.md). Both are implied by what the one write path guarantees:

    * rows are inserted only with their unit, in the transaction that holds the
      core's row lock and inserts the unit or read it, under that lock, by a join
      on the core (``memory.sql.append_to_unit``; ``restore_unit`` creates the unit
      in the same transaction), so the unit exists when they commit;
    * ``tenant_id`` is the locked core's, whose own foreign key to the tenant is
      checked, as are the unit's and the slice's; a tenant is ``PROTECT``;
    * units go only with their core (``delete_core``), which takes the core's row
      lock (a rolling's lock conflicts with it) and deletes the messages first, and
      the ORM's cascade (``on_delete`` is the ORM's in Django, not the database's)
      still deletes a unit's messages with it.

    Tenant isolation does not rest on these: row-level security's ``WITH CHECK
    (forge_visible(tenant_id))`` checks every row written, and every read filters by
    the tenant.
    """

    tenant = models.ForeignKey(
        "accounts.Tenant",
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    unit = models.ForeignKey(
        MemoryUnit,
        on_delete=models.CASCADE,
        related_name="messages",
        db_index=False,
        db_constraint=False,
    )
    index = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["unit", "index", "tenant"], name="memorymessage_unit_index"
            )
        ]
        indexes = [
            # A session's newest rolled message (the runtime trims what the model sees
            # of that session up to it): a backward walk of the session's rows.
            models.Index(
                fields=["session_id", "message_id"],
                condition=~models.Q(session_id=""),
                name="memorymessage_session",
            )
        ]
        ordering = ["unit", "index"]
        verbose_name = "memory message"

    def __str__(self) -> str:
        return f"{self.unit_id}[{self.index}] {self.role}"


class MemorySlice(models.Model):
    """A summary of messages ``[start_index, end_index)`` of its unit.

    ``indexed`` turns true once the slice is in the full-text index: its summary
    and the raw messages of its range, as the tokens of ``memory.text`` (an
    AfterRolling consumer; ``roll_dialogs`` catches up any it missed).
    ``search_length`` is how many tokens that document holds (BM25's length). On
    SQLite ``search_rowid`` is the document's row in the FTS5 table; on
    PostgreSQL the table has ``search_document`` (tsvector) and ``search_text``
    (the tokens, a line per message) columns instead, outside the ORM (see
    migrations 0002 and 0005).
    """

    id = models.CharField(primary_key=True, max_length=ID_MAX, default=new_slice_id)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    unit = models.ForeignKey(
        MemoryUnit, on_delete=models.CASCADE, related_name="slices", db_index=False
    )
    start_index = models.PositiveIntegerField()
    end_index = models.PositiveIntegerField()
    summary = models.TextField()
    created_at = models.DateTimeField(default=now_ms)
    indexed = models.BooleanField(default=False)
    # Condensed into the core's ``history_digest`` (``memory.digest``): the block shows the
    # digest in its place. The database's default, so that the rolling's own INSERT
    # (``memory.sql``) need not name it.
    digested = models.BooleanField(default=False, db_default=False)
    # Unique with the tenant (``memoryslice_tenant_search_rowid``), not alone: see
    # forge.db.citus.
    search_rowid = models.BigIntegerField(null=True, blank=True, editable=False)
    search_length = models.PositiveIntegerField(null=True, blank=True, editable=False)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end_index__gte=models.F("start_index")),
                name="memoryslice_range",
            ),
            models.UniqueConstraint(
                fields=["search_rowid", "tenant"], name="memoryslice_tenant_search_rowid"
            ),
        ]
        indexes = [
            models.Index(fields=["unit", "created_at"], name="memoryslice_unit_created"),
            models.Index(
                fields=["created_at"],
                condition=models.Q(indexed=False),
                name="memoryslice_unindexed",
            ),
        ]
        ordering = ["unit", "created_at", "id"]
        verbose_name = "memory slice"

    def __str__(self) -> str:
        return f"{self.id} [{self.start_index}:{self.end_index}]"


class MemoryVectors(models.Model):
    """The dense vectors of one slice under one embedding model (``model`` is the
    embedder's ``name``: vectors of two names are never compared).

    ``data`` holds ``rows`` by ``dim`` float16 numbers (little-endian), unit rows: row 0
    is the slice's summary, row ``1 + i`` message ``start_index + i`` of its unit (all
    zeros for a message with no text). One row per slice rather than per vector: a
    rolling writes one row, and a core's vectors load in one ordered scan of the
    index ``(core, model, id)`` (``memory.vectors``).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("accounts.Tenant", on_delete=models.PROTECT, related_name="+")
    core = models.ForeignKey(MemoryCore, on_delete=models.CASCADE, related_name="+", db_index=False)
    slice = models.ForeignKey(
        MemorySlice, on_delete=models.CASCADE, related_name="vectors", db_index=False
    )
    model = models.CharField(max_length=200)
    dim = models.PositiveIntegerField()
    rows = models.PositiveIntegerField()
    start_index = models.PositiveIntegerField()
    data = models.BinaryField()
    created_at = models.DateTimeField(default=now_ms)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slice", "model", "tenant"], name="memoryvectors_slice_model"
            )
        ]
        indexes = [models.Index(fields=["core", "model", "id"], name="memoryvectors_core_model")]
        verbose_name = "memory vectors"
        verbose_name_plural = "memory vectors"

    def __str__(self) -> str:
        return f"{self.slice_id} ({self.model}, {self.rows}x{self.dim})"
