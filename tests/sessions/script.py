"""Drive a realistic conversation through the write services, every part type included.

Until the runtime lands this stands in for the Processor: it writes exactly
what CONTRACT §2 says a reply writes (empty part at start, whole part at end,
every tool state change, steps, patches).
"""

from __future__ import annotations

from typing import Any

from sessions import services
from sessions.log import format_time, now_ms


def now() -> str:
    return format_time(now_ms())


def user_turn(session: Any, text: str) -> str:
    message_id = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": message_id, "type": "text", "text": text}
    )
    return message_id


def _streamed(session: Any, message_id: str, kind: str, text: str) -> str:
    start = now()
    part_id = services.update_part(
        session=session,
        part={"message_id": message_id, "type": kind, "text": "", "time": {"start": start}},
    ).data["id"]
    services.update_part(
        session=session,
        part={"id": part_id, "text": text, "time": {"start": start, "end": now()}},
    )
    return part_id


def _tool(session: Any, message_id: str, call: int, name: str, ok: bool) -> str:
    part = {"message_id": message_id, "type": "tool", "call_id": f"call_{call}", "tool": name}
    part_id = services.update_part(session=session, part={**part, "state": {"status": "pending"}})
    part_id = part_id.data["id"]
    start = now()
    tool_input = {"path": f"notes/{call}.txt"}
    services.update_part(
        session=session,
        part={
            "id": part_id,
            "state": {"status": "running", "input": tool_input, "time": {"start": start}},
        },
    )
    if ok:
        final = {
            "status": "completed",
            "input": tool_input,
            "output": f"contents of notes/{call}.txt",
            "title": f"read notes/{call}.txt",
            "metadata": {"bytes": 24},
            "time": {"start": start, "end": now()},
        }
    else:
        final = {
            "status": "error",
            "input": tool_input,
            "error": "file not found",
            "metadata": {},
            "time": {"start": start, "end": now()},
        }
    services.update_part(session=session, part={"id": part_id, "state": final})
    return part_id


def assistant_turn(session: Any, parent_id: str, turn: int) -> str:
    info = {
        "role": "assistant",
        "parent_id": parent_id,
        "agent": "build",
        "model": {"provider": "offline", "model": "echo"},
    }
    message_id = services.update_message(session=session, info=info).data["id"]
    tokens = {"input": 100 + turn, "output": 20, "reasoning": 5, "cache_read": 0, "cache_write": 0}
    for step in range(2):
        services.update_part(
            session=session,
            part={"message_id": message_id, "type": "step-start", "snapshot": f"snap{turn}{step}"},
        )
        _streamed(session, message_id, "reasoning", f"Thinking about turn {turn}, step {step}.")
        if step == 0:
            _tool(session, message_id, turn * 10 + 1, "read_file", ok=True)
            _tool(session, message_id, turn * 10 + 2, "read_file", ok=False)
            services.update_part(
                session=session,
                part={
                    "message_id": message_id,
                    "type": "patch",
                    "hash": f"patch{turn}",
                    "files": ["notes/a.txt"],
                },
            )
        _streamed(session, message_id, "text", f"Answer {turn}.{step}: all good.  ")
        services.update_part(
            session=session,
            part={
                "message_id": message_id,
                "type": "step-finish",
                "reason": "tool-calls" if step == 0 else "stop",
                "snapshot": f"snap{turn}{step}e",
                "tokens": tokens,
                "cost": 0.0012,
            },
        )
    services.update_message(
        session=session,
        info={
            "id": message_id,
            "completed_at": now(),
            "finish": "stop",
            "tokens": tokens,
            "cost": 0.0024,
        },
    )
    return message_id


def drive(session: Any, turns: int = 3) -> dict[str, Any]:
    """A multi-turn session using every part type; returns ids of interest."""
    ids: dict[str, Any] = {"turns": []}
    for turn in range(turns):
        user_id = user_turn(session, f"Question {turn}: please read my notes.")
        if turn == 0:
            services.update_part(
                session=session,
                part={
                    "message_id": user_id,
                    "type": "file",
                    "mime": "text/plain",
                    "filename": "notes.txt",
                    "url": "/media/notes.txt",
                },
            )
            services.update_part(
                session=session, part={"message_id": user_id, "type": "agent", "name": "build"}
            )
        assistant_id = assistant_turn(session, user_id, turn)
        ids["turns"].append((user_id, assistant_id))
    # A compaction request and a subtask, then something removed again.
    compaction_user = user_turn(session, "Summarise so far.")
    services.update_part(
        session=session,
        part={"message_id": compaction_user, "type": "compaction", "auto": True, "overflow": False},
    )
    services.update_part(
        session=session,
        part={
            "message_id": compaction_user,
            "type": "subtask",
            "prompt": "Check the notes",
            "description": "notes check",
            "agent": "explore",
        },
    )
    throwaway = services.update_part(
        session=session, part={"message_id": compaction_user, "type": "text", "text": "oops"}
    ).data["id"]
    services.remove_part(session=session, part_id=throwaway)
    removed_message = user_turn(session, "never mind")
    services.remove_message(session=session, message_id=removed_message)
    services.update_session(session=session, title="Notes review")
    ids["compaction_user"] = compaction_user
    return ids
