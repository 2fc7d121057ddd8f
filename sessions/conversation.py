"""The conversation as an operator reads it in the admin: messages with their parts,
shaped for one template (``admin/forge_sessions/session/conversation.html``).

A pure function of ``{"info", "parts"}`` items (what the selectors return), so the
change page and the paged conversation page render the same way. Long texts are
cut (``TEXT_SHOWN``) with the full length said; nothing here reads the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

TEXT_SHOWN = 4000  # characters of one text, reasoning, tool input or output shown
PAGE = 50  # messages on one page of the conversation


def _cut(text: str) -> dict[str, Any]:
    return {"text": text[:TEXT_SHOWN], "cut": max(0, len(text) - TEXT_SHOWN), "length": len(text)}


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _part(data: dict[str, Any]) -> dict[str, Any] | None:
    kind = data.get("type")
    if kind in ("text", "reasoning"):
        shown = {"kind": kind, **_cut(str(data.get("text", "")))}
        shown["synthetic"] = bool(data.get("synthetic"))
        return shown
    if kind == "tool":
        state = data.get("state") or {}
        output = state.get("output")
        return {
            "kind": "tool",
            "tool": data.get("tool", ""),
            "call_id": data.get("call_id", ""),
            "status": state.get("status", ""),
            "input": _cut(_json(state.get("input", {}))),
            "output": None if output is None else _cut(str(output)),
            "error": state.get("error"),
            "compacted": bool((state.get("time") or {}).get("compacted")),
        }
    if kind == "file":
        return {
            "kind": "file",
            "filename": data.get("filename") or "",
            "mime": data.get("mime", ""),
            "url": data.get("url", ""),
        }
    if kind == "step-finish":
        return {
            "kind": "step-finish",
            "reason": data.get("reason", ""),
            "tokens": data.get("tokens") or {},
            "cost": data.get("cost", 0),
        }
    if kind == "step-start":
        return None  # a marker between steps; the step's finish says what it cost
    if kind == "subtask":
        return {
            "kind": "subtask",
            "agent": data.get("agent", ""),
            "description": data.get("description", ""),
            "prompt": _cut(str(data.get("prompt", ""))),
            "child_session_id": data.get("child_session_id"),
        }
    # agent, compaction, patch: shown by their fields
    rest = {k: v for k, v in data.items() if k not in ("id", "message_id", "session_id", "type")}
    return {"kind": kind or "?", "fields": _json(rest)}


def conversation(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per message, oldest first: role, time, agent and model, its parts in
    order (step-start markers left out), and for a reply its finish, error, tokens
    and cost."""
    shown = []
    for item in items:
        info = item["info"]
        parts = [p for p in (_part(data) for data in item["parts"]) if p is not None]
        shown.append(
            {
                "id": info.get("id", ""),
                "role": info.get("role", ""),
                "created_at": info.get("created_at", ""),
                "agent": info.get("agent"),
                "model": info.get("model"),
                "summary": bool(info.get("summary")),
                "finish": info.get("finish"),
                "completed": info.get("completed_at") is not None,
                "error": info.get("error"),
                "tokens": info.get("tokens") or {},
                "cost": info.get("cost", 0),
                "parts": parts,
            }
        )
    return shown
