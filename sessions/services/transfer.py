"""Whole logs: rebuild a session's projection from its log, fork it; the copies' id
renaming and batched writes, which an import's copy (``imports``) shares."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from .. import selectors, snapshots, sql
from ..exceptions import NotFound
from ..ids import new_message_id, new_part_id
from ..models import CopiedMessage, Message, Part, Session, SessionEvent
from ..projector import Projection, fold, with_rolled_through_moved
from ..signals import history_copied, part_copying, session_deleted
from .batch import append_batch
from .session import TITLE_MAX, create_session
from .writes import AppendEvent, UpdateMessage, UpdatePart, Write


@transaction.atomic
def rebuild_projection(*, session: Session) -> Projection:
    """Replace the session's messages and parts with what its log projects to, and drop
    its context snapshot (``sessions.snapshots``, rebuilt by the next turn)."""
    if not _lock_session(session) or not Session.objects.filter(pk=session.pk).exists():
        raise NotFound(f"session {session.pk!r} does not exist")
    state = fold(
        SessionEvent.objects.filter(session=session).order_by("seq").iterator(chunk_size=2000)
    )
    Part.objects.filter(session=session).delete()
    Message.objects.filter(session=session).delete()
    snapshots.drop(session_id=session.pk)  # a cache of the log: the next turn stores it anew
    # A row's data is the event's at its seq (no column): the fold's ``data`` is not written.
    Message.objects.bulk_create(
        [Message(id=message_id, **_columns(row)) for message_id, row in state.messages.items()],
        batch_size=500,
    )
    Part.objects.bulk_create(
        [Part(id=part_id, **_columns(row)) for part_id, row in state.parts.items()],
        batch_size=500,
    )
    if state.session:
        Session.objects.filter(pk=session.pk).update(**state.session)
        session.title, session.agent = state.session["title"], state.session["agent"]
    return state


def _columns(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "data"}


def _lock_session(session: Session) -> bool:
    """Lock the session row for the current transaction (writers to it wait)."""
    with transaction.get_connection().cursor() as cursor:
        return sql.lock_session(cursor, sql.Dialect(cursor), session.pk, session.tenant_id)


# --- fork and import ------------------------------------------------------------


# The writes a fork or an import's copy appends at once (``append_batch``). One at a
# time, a 20,000-event copy took 20-26 s on SQLite, holding its one write lock (every
# tenant's writers wait), against 5-7 s (bench/transfer.py).
COPY_BATCH = 500


@contextmanager
def undone_on_failure(copy: Session) -> Iterator[None]:
    """What the application keeps beside a copy (the files ``part_copying`` copied, in
    the copy's transaction) goes when the copy fails: its transaction rolls the rows
    back, never the files. ``session_deleted`` is sent for the copy, which never was (a
    new id: nothing else is stored under it), before the failure goes on."""
    try:
        yield
    except BaseException:
        session_deleted.send(sender=Session, tenant_id=copy.tenant_id, session_id=copy.pk)
        raise


class CopyWriter:
    """A copy's writes, appended ``COPY_BATCH`` at a time (one event per write, as the
    single entries write them), in the copy's transaction."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.writes: list[Write] = []

    def add(self, write: Write) -> None:
        self.writes.append(write)
        if len(self.writes) >= COPY_BATCH:
            self.flush()

    def flush(self) -> None:
        """Append what is pending (before a write that goes another way)."""
        if self.writes:
            append_batch(session=self.session, writes=self.writes)
            self.writes = []


@transaction.atomic
def fork_session(*, session: Session, user: AbstractBaseUser, before_message_id: str) -> Session:
    """A new session holding the history before ``before_message_id`` (new ids, same content).

    The copies get new ids in the originals' order, so every id comparison still holds,
    and every id one of them names (a parent, a compaction's ``tail_start_id``, …) is
    renamed with :func:`remap_ids`, as an import's copy renames them.

    The source is read under its row's share lock (:func:`sql.share_session`) for the
    whole transaction: its writers and its deletion wait for the fork to commit, so
    the history (read in batches, each its own snapshot under READ COMMITTED) is one
    consistent history. Unlocked, a deletion committed between two batches left a
    fork holding the first batch only, answered as a success. A source deleted
    before the lock is ``NotFound`` (404), and nothing is written."""
    tenant = session.tenant
    with transaction.get_connection().cursor() as cursor:
        if not sql.share_session(cursor, sql.Dialect(cursor), session.pk, session.tenant_id):
            raise NotFound(f"session {session.pk!r} does not exist")
    selectors.get_message(tenant=tenant, session_id=session.pk, message_id=before_message_id)
    fork = create_session(
        user=user,
        tenant=tenant,
        title=f"{session.title or 'Session'} (fork)"[:TITLE_MAX],
        agent=session.agent or None,
    )
    with undone_on_failure(fork):
        _copy_history(session, fork, before_message_id=before_message_id)
    mark_copied(session=fork)
    return fork


def mark_copied(*, session: Session) -> int:
    """Record that the log of ``session`` is, up to its head now, a copy (an import's or
    a fork's): :attr:`Session.copied_through` is set to the head's seq, and returned.

    The invariant: usage counts only what this server's model calls cost, and what a
    copy logs ran elsewhere (or was counted in its source): an imported step-finish
    says whatever its file says. The marker is stored beside the log, not in it (an
    import keeps its events byte for byte, and their chain verifies), so the live
    count and ``rebuild_usage`` read the same boundary. Call it in the copy's
    transaction, after the last write that belongs to the copy."""
    head = (
        SessionEvent.objects.filter(tenant_id=session.tenant_id, session_id=session.pk)
        .order_by("-seq")
        .values_list("seq", flat=True)
        .first()
    ) or 0
    Session.objects.filter(pk=session.pk, tenant_id=session.tenant_id).update(copied_through=head)
    session.copied_through = head
    return head


def _before_cut(
    history: Iterable[dict[str, Any]], before_message_id: str
) -> Iterator[dict[str, Any]]:
    """The messages of ``history`` (oldest first) before ``before_message_id``, but for
    a compaction's request left last: its summary is at or past the cut (a fork at the
    summary). Copied alone it was no boundary, and every request of the fork sent the
    model its "Summarize the conversation" as a prompt no one typed (QA); a compaction
    cut in two is left out as if it never happened. (A failed summary writes nothing:
    no finished log holds a request without its summary elsewhere.)"""
    held: dict[str, Any] | None = None
    for item in history:
        if item["info"]["id"] >= before_message_id:
            break
        if held is not None:
            yield held
        held = item
    if held is not None and not (
        held["info"].get("role") == "user"
        and any(part.get("type") == "compaction" for part in held["parts"])
    ):
        yield held


def _copy_history(session: Session, fork: Session, *, before_message_id: str) -> None:
    """Copy the messages before ``before_message_id``, and the source's context
    updates where they were among them.

    Each ``context.updated`` goes before the first copied message created after it
    (:func:`selectors.placed_context_updates`), with its cut moved into the copy's ids,
    so replaying a copied step derives the request that step was sent: the blocks of
    that time, not today's. Before, the fold of every update was logged once, first,
    and every copied step replayed with the newest memory block (QA). The updates
    made after the fork point follow the copied history, so the fork's next turn
    starts from the source's blocks as they are now, as it did."""
    tenant = session.tenant
    updates = deque(selectors.placed_context_updates(tenant=tenant, session=session))
    new_ids: dict[str, str] = {}  # message ids only: ``rolled_through_moved`` reads it
    writes = CopyWriter(fork)
    files: set[Any] = set()  # the stored files carried (``carried``)

    def updates_before(message_id: str | None) -> None:
        """Write the updates logged before message ``message_id`` was made (all: None)."""
        while updates and (
            message_id is None or updates[0][0] is None or updates[0][0] < message_id
        ):
            blocks = updates.popleft()[1].get("blocks") or []
            moved = with_rolled_through_moved(blocks, new_ids)
            writes.add(AppendEvent(type="context.updated", data={"blocks": moved}))

    for item in _before_cut(
        selectors.iter_history(tenant=tenant, session_id=session.pk), before_message_id
    ):
        info = item["info"]
        updates_before(info["id"])
        new_ids[info["id"]] = new_message_id()
        copy = {**remap_ids(info, new_ids), "session_id": fork.pk}
        if copy.get("parent_id") and info["parent_id"] not in new_ids:
            copy["parent_id"] = None  # a parent that is no more (never copied)
        writes.add(UpdateMessage(info=copy))
        parts = {part["id"]: new_part_id() for part in item["parts"]}
        for part in item["parts"]:
            renamed = remap_ids(part, {**new_ids, **parts})
            writes.add(UpdatePart(part=carried({**renamed, "session_id": fork.pk}, fork, files)))
    updates_before(None)
    writes.flush()
    record_copies(copy=fork, source_id=session.pk, new_ids=new_ids)
    history_copied.send(sender=Session, source_id=session.pk, copy=fork, new_ids=new_ids)


def record_copies(*, copy: Session, source_id: str, new_ids: Mapping[str, str]) -> None:
    """Record what each message of ``copy`` was copied from (:class:`CopiedMessage`), in
    the copy's transaction: ``new_ids`` (original -> copy's, messages only) from session
    ``source_id``, and, when the source is itself a copy in the same tenant (a fork of a
    fork, a copy imported from a copy's export here), what those originals were copied
    from in turn, so that the copy maps back to every source up the chain. One read of
    the source's rows (on the index's leading column), inserted with the copy's in
    batches."""
    if not new_ids:
        return
    tenant_id, copy_id = copy.tenant_id, copy.pk
    rows = [
        CopiedMessage(
            tenant_id=tenant_id,
            session_id=copy_id,
            message_id=new,
            source_session_id=source_id,
            source_message_id=old,
        )
        for old, new in new_ids.items()
    ]
    upstream = CopiedMessage.objects.filter(tenant_id=tenant_id, session_id=source_id)
    for message_id, first_session_id, first_message_id in upstream.values_list(
        "message_id", "source_session_id", "source_message_id"
    ).iterator(chunk_size=2000):
        if message_id in new_ids:
            rows.append(
                CopiedMessage(
                    tenant_id=tenant_id,
                    session_id=copy_id,
                    message_id=new_ids[message_id],
                    source_session_id=first_session_id,
                    source_message_id=first_message_id,
                )
            )
    CopiedMessage.objects.bulk_create(rows, batch_size=COPY_BATCH)


ID_FIELDS = ("id", "message_id", "parent_id", "tail_start_id", "part_id")


def _output_file(part: dict[str, Any]) -> dict[str, Any] | None:
    """A tool part's ``state.metadata.output_file`` (the ``file`` part holding its whole
    output, ``forge.runtime.tool_output``), if any."""
    state = part.get("state")
    metadata = state.get("metadata") if isinstance(state, dict) else None
    spilled = metadata.get("output_file") if isinstance(metadata, dict) else None
    return spilled if isinstance(spilled, dict) else None


def carried(part: dict[str, Any], copy: Session, files: set[Any]) -> dict[str, Any]:
    """The part a copy writes, as the receivers of ``part_copying`` make it (the
    application carries a ``file`` part's stored file into the copy). ``files``: one set
    per copy, for the receivers to note what they carried (each stored file once)."""
    for _, answer in part_copying.send(sender=Session, part=part, session=copy, files=files):
        replacement: Any = answer
        if isinstance(replacement, dict):
            part = replacement
    return part


def remap_ids(data: dict[str, Any], new_ids: Mapping[str, str]) -> dict[str, Any]:
    """``data`` (a message, a part, an event's data) with every id-valued field
    (:data:`ID_FIELDS`, and a tool part's ``state.metadata.output_file.part_id``)
    renamed to the copy's id (``new_ids``: original -> copy, the
    copies' ids made in the originals' order). The one renaming of fork and of an
    import's copy: a field left as it was names the *source's* message, and since every
    copied id sorts after it, a compaction's ``tail_start_id`` then kept the whole
    summarized history in the fork's context.

    A ``tail_start_id`` whose message was not copied (removed from the source) becomes
    the copy of the first message after it, which is what it stood for: the tail
    starts there either way."""
    copy = dict(data)
    spilled = _output_file(copy)
    moved = spilled.get("part_id") if spilled is not None else None
    if spilled is not None and isinstance(moved, str) and moved in new_ids:
        state = copy["state"]  # a tool's output stored as a file: its part is renamed
        output_file = {**spilled, "part_id": new_ids[moved]}
        copy["state"] = {**state, "metadata": {**state["metadata"], "output_file": output_file}}
    for key in ID_FIELDS:
        value = copy.get(key)
        if not isinstance(value, str):
            continue
        if value in new_ids:
            copy[key] = new_ids[value]
        elif key == "tail_start_id":
            kind = value.split("_", 1)[0] + "_"  # a message's id, never a part's
            later = [o for o in new_ids if o > value and o.startswith(kind)]
            if later:
                copy[key] = new_ids[min(later)]
    return copy
