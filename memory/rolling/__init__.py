"""DialogRolling: from the dialogue window to a unit's messages and a slice.

Two triggers (the seed's ``triggerRolling(false|true)``):

* ``threshold`` — the window holds ``threshold`` messages or more: roll the
  window's messages except the ``keep`` most recent (or a few more, so that no
  turn is split between rolled and kept), which stay in the window
  *not rolled* (the next rolling's increment starts with them);
* ``idle`` — no interaction for ``idle_after``: roll it all, empty the window
  and start a new memory session, so the next dialogue goes to a new unit.

(``manual`` is a rolling asked for by an operator: like ``threshold``, whatever
the window's size.)

Invariant after every rolling: the window holds exactly the messages no unit
holds (``rolled_seq == window_next_seq - window_count``). So the runtime can
show the model the ``dialog_history`` summaries *in place of* the rolled turns
plus the ``keep`` newest messages verbatim, and no turn reaches the model both
raw and summarized (the session's log records that cut: ``forge.context``).

The steps of one rolling (:func:`roll`):

1. claim the core (PostgreSQL: a session advisory lock, so two rollers never
   summarize one core twice; released by the database if the process dies);
2. snapshot the window and resolve the increment — the window's messages with
   ``seq`` in ``[rolled_seq, cutoff)``, where the cutoff is ``next_seq - keep``
   moved back to the start of a turn (``next_seq`` when idle; see
   :mod:`.snapshot`) — with no transaction open; an empty increment is
   ``not_due``;
3. MessageCompressor, then MessageSummarizer, still with no transaction open
   (SQLite has one writer: chat must not wait for a model);
4. commit, in one short transaction, after locking the core row (``FOR UPDATE
   SKIP LOCKED`` on PostgreSQL) and re-checking that the increment is still the
   one summarized (else the core is skipped, nothing written):
   ``update_memory_unit`` (the increment appended to the unit, a slice covering
   exactly its range), the window trimmed below the cutoff, ``rolled_seq`` set
   to the cutoff (and the memory session renewed when idle);
5. after commit, the AfterRolling consumers with the ``RollingResult``.

A rolling killed at any point leaves the core as it was (before 4 commits) or
fully rolled (after): the slice, its messages, the trimmed window and the
advanced ``rolled_seq`` are written together or not at all.

Cores rolled before this rule kept their ``keep`` newest messages in the
window *after* rolling them (``rolled_seq`` above the window's first seq). The
next rolling of such a core trims those too, so the invariant holds from then
on; an idle rolling of a window that holds only such messages trims it and
renews the session without a slice.

The package, one concern a module (everything other code uses is re-exported here; the
tuning constants are not, so that a patch of one is made where it is read):

* :mod:`.options` — :class:`RollingOptions` and when a core is due (:func:`due`,
  :func:`candidate_core_ids`);
* :mod:`.outcome` — :class:`RollOutcome`, what happened to one core, and its statuses;
* :mod:`.snapshot` — :class:`Snapshot` and :func:`take_snapshot` (step 2);
* :mod:`.steps` — one core's rolling: :func:`roll`, :func:`prepare` (steps 1-3),
  :func:`commit` (step 4, and 5 on commit), :func:`release`;
* :mod:`.sweeps` — :func:`sweep`, its groups of cores committed together and its
  :class:`SweepReport`.
"""

from .options import RollingOptions, candidate_core_ids, due
from .outcome import RollOutcome, Status
from .snapshot import Snapshot, take_snapshot
from .steps import Work, commit, prepare, release, roll
from .sweeps import SweepReport, _Group, group_size, sweep

__all__ = [
    "RollOutcome",
    "RollingOptions",
    "Snapshot",
    "Status",
    "SweepReport",
    "Work",
    "_Group",  # tests/memory/test_rolling_groups.py spies on its _write
    "candidate_core_ids",
    "commit",
    "due",
    "group_size",
    "prepare",
    "release",
    "roll",
    "sweep",
    "take_snapshot",
]
