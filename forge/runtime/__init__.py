"""The agent runtime. The faces start and stop turns through these names only."""

from .agents import UnknownAgent
from .inflight import snapshots
from .lease import SessionBusy
from .turns import (
    Attachment,
    InvalidPrompt,
    NotRunning,
    PromptResult,
    StartedTurn,
    abort,
    abort_turn,
    context_for,
    prompt,
    recover_session,
    recover_sessions,
    running_turn,
    settle,
    start_turn,
    wait_for_turn,
)

__all__ = [
    "Attachment",
    "InvalidPrompt",
    "NotRunning",
    "PromptResult",
    "SessionBusy",
    "StartedTurn",
    "UnknownAgent",
    "abort",
    "abort_turn",
    "context_for",
    "prompt",
    "recover_session",
    "recover_sessions",
    "running_turn",
    "settle",
    "snapshots",
    "start_turn",
    "wait_for_turn",
]
