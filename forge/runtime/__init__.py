"""The agent runtime. The faces start, ask about and stop turns through these names only.

* ``prompting``: validating and logging a prompt (the one validation);
* ``regenerate``: logging a new reply to the last reply's prompt;
* ``runner``: the turns this process runs: start (the one entry), abort, settle;
* ``aborting``: the abort the faces use (an abort the layer cannot deliver: 503);
* ``steps``: a turn's steps, each from a fresh read of the store;
* ``processor``: one step's model stream turned into parts, deltas and tool calls;
* ``recovery``: finalizing what a dead runner left open (start-up, janitor, command);
* ``lease``, ``inflight``, ``finalize``, ``subtask``, ``title``, ``agents``: their one job each;
* ``approvals``: tool approval rules, answering a waiting call, expiring them;
* ``sync``: the same entry for synchronous callers.
"""

from forge.errors import (
    ApprovalAnswered,
    ApprovalExpired,
    ApprovalNotFound,
    InvalidPrompt,
    NothingToRegenerate,
    NotLastReply,
    NotRunning,
    PromptTooLarge,
    SessionBusy,
    UnknownAgent,
)

from .aborting import abort_turn
from .approvals.pending import pending_approvals
from .approvals.services import answer, answer_sync
from .files import fork_session
from .inflight import snapshots
from .lease import delete_session, is_busy, with_busy
from .prompting import Attachment
from .recovery import recover_session, recover_sessions, start_janitor
from .runner import (
    StartedTurn,
    running_turn,
    settle,
    start_compaction,
    start_regeneration,
    start_turn,
)
from .sync import PromptResult, abort, compact, prompt, regenerate

__all__ = [
    "ApprovalAnswered",
    "ApprovalExpired",
    "ApprovalNotFound",
    "Attachment",
    "InvalidPrompt",
    "NotLastReply",
    "NotRunning",
    "NothingToRegenerate",
    "PromptResult",
    "PromptTooLarge",
    "SessionBusy",
    "StartedTurn",
    "UnknownAgent",
    "abort",
    "abort_turn",
    "answer",
    "answer_sync",
    "compact",
    "delete_session",
    "fork_session",
    "is_busy",
    "pending_approvals",
    "prompt",
    "recover_session",
    "recover_sessions",
    "regenerate",
    "running_turn",
    "settle",
    "snapshots",
    "start_compaction",
    "start_janitor",
    "start_regeneration",
    "start_turn",
    "with_busy",
]
