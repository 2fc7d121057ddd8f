"""Where the runtime meets long-term memory (the seed's CommunicationProducer step).

Memory is the speaker's (CONTRACT §2): a session is shared by its tenant, but
memory belongs to (tenant, user, agent), and the user is the one who spoke the
turn (sent the prompt, or asked for the regeneration), whoever owns the
session. The speaker is logged on the prompt and on the reply (``user_id``);
finishing a turn reads it from the reply, as the memory tools do.

* :func:`complete_reply`: a reply that finishes normally is completed (its last
  step's held parts and the message update, one batch) in one transaction
  with the append of that turn's user input and the assistant's
  final text (not reasoning, not tool output) to the dialogue window of the
  core of (tenant, speaker, agent). Aborted and failed replies never get here.
  A regenerated reply records its text only when the reply it replaces had
  recorded the prompt already in the same speaker's window (that one finished
  normally, for the same user): in the replaced answer's place while the window
  still holds it unrolled (memory holds the answer the chat shows, not both),
  else after it (rolled, the replaced answer stays in its unit). A user who
  regenerates another's reply asked that prompt again: their window gets the
  prompt and the new answer.
* :func:`memory_blocks`: at the start of a turn, the speaker's core's current
  ``dialog_history`` block (or its removal), for ``set_blocks`` to log when it
  changed, so the model's view of memory is in the session's log and a request
  stays replayable from it. The block names the newest message of this session
  that the core has rolled (``rolled_through``): the context derivation
  (``forge.context.rolled``) hides the session's history up to it, so the
  summaries stand *in place of* the rolled turns and no turn reaches the model
  both raw and summarized (the trim). In a fork or an import's copy, the copies
  of the source's messages the core rolled count too, whenever it rolled them
  (``sessions.models.CopiedMessage`` names each copy's original). When the next
  turn's speaker is another user, the block, and with it the trim, changes to
  theirs (or is removed, and nothing is trimmed): one user never sees another's
  memory, and the turns their memory did not roll are shown verbatim again.

Subtasks (a turn started by another turn's ``task`` tool) are the agent talking
to itself, not dialogue with the user: they are neither recorded nor given the
block (their memory tools still read the speaker's memory, which they inherit).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, transaction

from accounts.selectors import member
from forge.context import store_snapshot
from forge.context.blocks import blocks_in_force, set_blocks
from forge.context.rolled import MAX_KEPT, cut_among, is_others
from memory import selectors as memory_selectors
from memory import services as memory_services
from memory import turn_sql as memory_turn_sql
from memory.normalize import MESSAGE_TEXT_MAX
from sessions import selectors, services, turn_sql
from sessions import sql as session_sql
from sessions.models import Session

from . import accounting, lease
from .turn import Turn


def _text(item: dict[str, Any]) -> str:
    """A message's text as its speaker's memory keeps it: its text parts, clipped to what
    a memory message holds (``MESSAGE_TEXT_MAX``, an ellipsis last). A longer reply is a
    normal reply (~25,000 tokens): the log keeps it whole, and the memory window's
    copy, which only rolling's summary reads, must never fail its completion."""
    parts = item["parts"]
    text = "\n".join(
        p["text"] for p in parts if p["type"] == "text" and not p.get("synthetic") and p["text"]
    ).strip()
    if len(text) > MESSAGE_TEXT_MAX:
        text = text[: MESSAGE_TEXT_MAX - 1] + "…"
    return text


def speaker_id(info: dict[str, Any], session: Session) -> Any:
    """The id of the user a logged reply answered: its ``user_id``; a reply logged
    before speakers were recorded was the session owner's."""
    return info.get("user_id", session.user_id)


def complete_reply(turn: Turn, info: dict[str, Any], held: Sequence[services.Write] = ()) -> None:
    """Write the last step's ``held`` writes and the finished reply's message update
    (one batch), record the exchange in the speaker's window, and give the session's
    lease back, atomically.

    The lease goes with the completion: the reply is finished, so the session is
    free for its next prompt from this commit on, and the turn's end costs no
    transaction (and no hop to the database thread) of its own. The ``idle`` status
    is published on the same commit, after the completion's event: the session's
    next turn, which may start from then on (in any process), publishes its
    ``busy`` after it. ``Turn.lease_released`` tells the runner, once the
    transaction committed, that there is nothing left to give back or announce; a
    completion that fails leaves both to the runner, as before.

    Plain SQL after the batch: one statement reads the exchange from the log, one
    (two on SQLite) appends it to an existing core's window with the membership
    check folded in (``memory_services.append_to_window``); only a speaker's first
    turn with the agent (no core yet) takes the ORM path that creates the core."""
    session = turn.session
    with transaction.atomic():
        _complete_and_record(turn, info, held)
        lease.release(session_id=session.pk, tenant_id=session.tenant_id)
        services.publish_status_on_commit(session_id=session.pk, status="idle")
    turn.lease_released = not connection.in_atomic_block  # committed, not only nested


def _complete_and_record(turn: Turn, info: dict[str, Any], held: Sequence[services.Write]) -> None:
    session = turn.session
    events = services.append_batch(
        session=session, writes=[*held, services.UpdateMessage(info=info)]
    )
    store_snapshot(session, events)
    if turn.depth:
        accounting.reply_completed(
            session=session,
            info=events[-1].data,
            started_at=turn.started_at,
            first_delta_at=turn.first_delta_at,
        )
        return
    with connection.cursor() as cursor:
        exchange = turn_sql.read_messages(
            cursor,
            session_sql.Dialect(cursor),
            tenant_id=session.tenant_id,
            session_id=session.pk,
            message_ids=[turn.user_message_id, turn.message_id],
        )
    asked, answered = exchange[turn.user_message_id], exchange[turn.message_id]
    accounting.reply_completed(  # the parts just read: no read of its own
        session=session,
        info=answered["info"],
        parts=answered["parts"],
        started_at=turn.started_at,
        first_delta_at=turn.first_delta_at,
    )
    # From the log, not from this process: the speaker the reply records.
    speaker = answered["info"].get("user_id")
    if isinstance(speaker, bool) or not isinstance(speaker, int):
        return  # no speaker logged: no memory to write
    old = turn.supersedes
    recorded = (
        old is not None
        and bool(old.get("completed_at"))
        and not old.get("error")
        and speaker_id(old, session) == speaker
    )
    messages = [
        {
            "role": item["info"]["role"],
            "text": text,
            "session_id": session.pk,
            "message_id": item["info"]["id"],
        }
        for item in ((answered,) if recorded else (asked, answered))
        if (text := _text(item))
    ]
    if not messages:
        return
    if (
        recorded
        and old is not None
        and memory_services.replace_in_window(
            tenant_id=session.tenant_id,
            user_id=speaker,
            agent=turn.agent.name,
            replaced=str(old.get("id")),
            message=messages[0],
        )
    ):
        return  # the new answer took the old one's place: memory holds one answer
    if memory_services.append_to_window(
        tenant_id=session.tenant_id, user_id=speaker, agent=turn.agent.name, messages=messages
    ):
        return
    # No core yet, or a speaker gone from the tenant (then no memory to write).
    tenant = session.tenant
    user = member(tenant=tenant, user_id=speaker)
    if user is not None:
        memory_services.append_dialogue(
            tenant=tenant, user=user, agent=turn.agent.name, messages=messages
        )


def memory_blocks(
    session: Session,
    agent: str,
    speaker: AbstractBaseUser | None,
    *,
    depth: int = 0,
    keep_from: str | None = None,
    current: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The ``dialog_history`` block the turn's model should see: the speaker's core's
    current one, or a removal of any earlier one (another speaker's included) when
    that core has none.

    The block carries ``rolled_through``: the id of the newest message of this
    session the core has rolled (None: none), below ``keep_from`` when given (a
    regenerated reply's prompt must reach the model even if it was rolled). ``current``:
    the session's blocks in force, when the caller read them for ``blocks_update``."""
    if depth:
        return []
    removed = [{"kind": "dialog_history", "key": "memory", "removed": True}]
    if speaker is None:
        return removed
    with connection.cursor() as cursor:  # the common answer (no rolled unit): one statement
        _, unit_id = memory_turn_sql.history_unit(
            cursor, tenant_id=session.tenant_id, user_id=speaker.pk, agent=agent
        )
    if unit_id is None:
        return removed
    tenant = session.tenant
    core = memory_selectors.find_core(tenant=tenant, user=speaker, agent=agent)
    if core is None:
        return removed
    block = memory_selectors.dialog_history_block(tenant=tenant, core=core)
    if block is None:
        return removed
    through = _rolled_through(session, core, before=keep_from)
    if current is None:
        current = blocks_in_force(session)  # (read once, for the two uses below)
    # A fork or an imported copy holds turns the core rolled under their original ids:
    # the copy's block names the copy's own newest one (``sessions.services.transfer``),
    # which the core's rows cannot say; that cut stands while the block is this core's.
    logged = _logged_through(session, core_id=core.pk, current=current)
    if logged is not None and (keep_from is None or logged < keep_from):
        through = logged if through is None else max(through, logged)
    through = _between_turns(session, core, through)
    return [_with_cut(block, *_kept_in_view(session, core, through, current=current))]


def _with_cut(block: dict[str, Any], through: str | None, kept: list[str]) -> dict[str, Any]:
    """The block with its cut, and the messages below it kept in view when there are any
    (a session of one agent and speaker logs no ``rolled_kept``)."""
    return {**block, "rolled_through": through, **({"rolled_kept": kept} if kept else {})}


def _kept_in_view(
    session: Session,
    core: Any,
    through: str | None,
    *,
    current: Mapping[str, Mapping[str, Any]] | None,
    copy: bool = False,
) -> tuple[str | None, list[str]]:
    """``(cut, kept)``: the cut at ``through`` hides only the core's own messages; those
    of another agent or speaker below it are kept in view (``forge.context.rolled``:
    ``cut_among``). Only the messages above the core's cut in force are read, and none
    while the cut stays where it is (every turn between two rollings)."""
    if through is None:
        return None, []
    if current is None:
        current = blocks_in_force(session)
    block = current.get("dialog_history:memory")
    start, kept = None, []
    if block is not None and block.get("core_id") == core.pk:
        logged = block.get("rolled_through")
        if isinstance(logged, str) and logged <= through:
            start = logged
            kept = [item for item in block.get("rolled_kept") or () if isinstance(item, str)]
    if start == through or (start is not None and len(kept) >= MAX_KEPT):
        # (At the limit the cut stays where it stopped, below another's message: the
        # range from it would stop at once.)
        return start if start is not None else through, kept
    infos = selectors.message_infos_between(
        tenant=session.tenant, session=session, after=start, upto=through
    )
    return cut_among(
        infos,
        start=start,
        through=through,
        kept=kept,
        agent=core.agent,
        user_id=core.user_id,
        is_other=(
            _copies_told_apart(session, core, after=start, upto=through)
            if copy or session.copied_through is not None
            else None
        ),
    )


def _copies_told_apart(
    session: Session, core: Any, *, after: str | None, upto: str
) -> Callable[[Mapping[str, Any]], bool] | None:
    """For a copy (a fork, an import's copy) with copied messages in the range: how a
    message is told another's there. A copied turn is the core's when the core rolled
    its original (``CopiedMessage``); its ``user_id`` may not say whose it was (an
    import's copy names the importing user as every message's speaker: another
    member's turns were taken for the core's, hidden, and lost, QA). Other messages,
    and copied ones that name no speaker (a compaction's), are told by their agent and
    speaker. None: nothing copied in the range."""
    origins = selectors.copy_origins(tenant=session.tenant, session=session, after=after, upto=upto)
    if not origins:
        return None
    rolled = memory_selectors.rolled_among(
        tenant=session.tenant,
        core=core,
        messages=[origin for found in origins.values() for origin in found],
    )

    def is_other(info: Mapping[str, Any]) -> bool:
        found = origins.get(str(info["id"]))
        if found is None or info.get("user_id") is None or info.get("summary"):
            return is_others(info, agent=core.agent, user_id=core.user_id)
        return not any(origin in rolled for origin in found)

    return is_other


def _between_turns(session: Session, core: Any, through: str | None) -> str | None:
    """``through`` moved back, if it must, so that no reply the model sees follows the cut
    while its prompt is hidden by it.

    The one reply newer than the core's rolled messages whose prompt the core rolled is
    a regenerated one (its prompt was rolled with the reply it replaced; the window
    records the new answer alone, and the next rolling rolls it). Until then the cut
    stops below that prompt, as it did for the regenerating turn (``keep_from``): the
    model's history after the block starts with the prompt, not with an answer to a
    question it cannot see. One indexed read when a cut is in force."""
    if through is None:
        return None
    following = selectors.message_after(tenant=session.tenant, session=session, message_id=through)
    parent = following.get("parent_id") if following is not None else None
    if following is None or following.get("role") != "assistant" or not isinstance(parent, str):
        return through
    if parent > through:
        return through
    return _rolled_through(session, core, before=parent)


def _rolled_through(session: Session, core: Any, *, before: str | None) -> str | None:
    """The id of the newest message of the session that the core has rolled, below
    ``before`` when given: its own messages the core rolled, and in a copy (a fork, an
    import's copy: ``copied_through`` is set), also the copies of its sources' messages
    the core rolled, whenever it rolled them (before or after the copy was made).

    A session that copied nothing pays one indexed read, as before; a copy pays one
    more for its sources (``sessions.selectors.copy_sources``) and two per source: the
    core's newest rolled message of that source, and that message's newest copy here
    (``copy_through``), which keeps the cut ``< before``. The cut hides every message of
    the copy up to it: copies are made in their originals' order and before anything the
    copy logs itself, and the core rolled its window oldest first."""
    tenant = session.tenant
    through = memory_selectors.last_rolled_message(
        tenant=tenant, core=core, session_id=session.pk, before=before
    )
    if session.copied_through is None:
        return through
    for source_id in selectors.copy_sources(tenant=tenant, session=session):
        rolled = memory_selectors.last_rolled_message(
            tenant=tenant, core=core, session_id=source_id
        )
        if rolled is None:
            continue
        cut = selectors.copy_through(
            tenant=tenant,
            session=session,
            source_session_id=source_id,
            through=rolled,
            before=before,
        )
        if cut is not None and (through is None or cut > through):
            through = cut
    return through


def _logged_through(
    session: Session, *, core_id: str, current: Mapping[str, Mapping[str, Any]] | None
) -> str | None:
    """The ``rolled_through`` of the session's memory block in force, when that block is
    core ``core_id``'s (``current``: the blocks in force, read here when not given)."""
    if current is None:
        current = blocks_in_force(session)
    block = current.get("dialog_history:memory")
    if block is None or block.get("core_id") != core_id:
        return None
    through = block.get("rolled_through")
    return through if isinstance(through, str) and through else None


def on_history_copied(
    sender: Any, source_id: str, copy: Session, new_ids: Mapping[str, str], **kwargs: Any
) -> None:
    """``sessions.signals.history_copied``: a fork or an import's copy of a session whose
    turns memory rolled keeps them cut from the model's view, as the source's next turn
    would.

    The copy carries the source's logged block, its ``rolled_through`` renamed
    (``sessions.projector.rolled_through_moved``); but a rolling since the source's last
    turn is in memory only, so a copy made then showed those turns raw and again in
    the summaries (QA). The core is the copy's owner's with its agent, whose next turn
    sees that core's block: when it rolled messages of the source beyond what the copy's
    block says, the block is logged in the copy with the cut at the copy of the newest
    of them."""
    from .agents import default_agent

    tenant = copy.tenant
    if copy.user is None:
        return
    agent = copy.agent or default_agent().name
    core = memory_selectors.find_core(tenant=tenant, user=copy.user, agent=agent)
    if core is None:
        return
    through = memory_selectors.last_rolled_message(tenant=tenant, core=core, session_id=source_id)
    covered = [original for original in new_ids if through is not None and original <= through]
    if not covered:
        return
    # The cut never hides the prompt of a reply it shows (a regenerated one), as at a
    # turn (QA: the copy's request began with an answer).
    cut = _between_turns(copy, core, new_ids[max(covered)])
    current = blocks_in_force(copy)
    logged = _logged_through(copy, core_id=core.pk, current=current)
    if cut is None or (logged is not None and logged >= cut):
        return
    block = memory_selectors.dialog_history_block(tenant=tenant, core=core)
    if block is not None:
        # (Called as the copy is made: its ``copied_through`` is not set yet.)
        kept = _kept_in_view(copy, core, cut, current=current, copy=True)
        set_blocks(copy, [_with_cut(block, *kept)])
