"""The agent runtime. The faces start and stop turns through these names only."""

from .agents import UnknownAgent
from .lease import SessionBusy
from .turns import (
    Attachment,
    InvalidPrompt,
    NotRunning,
    StartedTurn,
    abort_turn,
    recover_session,
    recover_sessions,
    running_turn,
    start_turn,
    wait_for_turn,
)

__all__ = [
    "Attachment",
    "InvalidPrompt",
    "NotRunning",
    "SessionBusy",
    "StartedTurn",
    "UnknownAgent",
    "abort_turn",
    "recover_session",
    "recover_sessions",
    "running_turn",
    "start_turn",
    "wait_for_turn",
]
