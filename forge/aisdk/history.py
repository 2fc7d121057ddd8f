"""A stored Forge message as the AI SDK's ``UIMessage`` (the chat's history route): the
parts a client ends with after streaming it (:mod:`forge.aisdk.chunks`, folded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .chunks import (
    AWAITING,
    BLOCKS,
    DATA_PARTS,
    data_of,
    denial_reason,
    is_denied,
    metadata_of,
    raw_input_of,
)

_TOOL_STATES = {
    "pending": "input-streaming",
    "running": "input-available",
    "completed": "output-available",
    "error": "output-error",
}


def ui_message(item: Mapping[str, Any], *, approvals: bool = False) -> dict[str, Any]:
    """A stored message ``{info, parts}`` as an AI SDK ``UIMessage``: the parts a client
    ends with after streaming it (the chunks above, folded)."""
    info = item["info"]
    message: dict[str, Any] = {"id": info["id"], "role": info["role"], "parts": []}
    for part in item["parts"]:
        message["parts"] += ui_part(part, approvals=approvals)
    if info["role"] == "assistant":
        message["metadata"] = metadata_of(info)
    return message


def ui_part(part: Mapping[str, Any], *, approvals: bool = False) -> list[dict[str, Any]]:
    kind = part["type"]
    if kind == "text" and part.get("synthetic"):
        # An attachment's text, as the model is given it: not what the user wrote (the
        # chat page folds it under "Attached text"; an AI SDK app chooses).
        return [{"type": "data-attached-text", "id": part["id"], "data": {"text": part["text"]}}]
    if kind in BLOCKS:
        return [{"type": kind, "text": part.get("text", "")}]
    if kind == "step-start":
        return [{"type": "step-start"}]
    if kind == "step-finish":
        step = {k: part.get(k) for k in ("reason", "tokens", "cost")}
        return [{"type": "data-step-finish", "id": part["id"], "data": step}]
    if kind == "tool":
        return [_ui_tool(part, approvals)]
    if kind == "file":
        out = {"type": "file", "mediaType": part.get("mime", ""), "url": part.get("url", "")}
        if part.get("filename"):
            out["filename"] = part["filename"]
        return [out]
    return [{"type": f"data-{DATA_PARTS.get(kind, kind)}", "id": part["id"], "data": data_of(part)}]


def _ui_tool(part: Mapping[str, Any], approvals: bool) -> dict[str, Any]:
    """A tool part as a ``UIMessage`` tool part; with ``approvals`` (ai 6+) the
    approval states and the part's ``approval`` (its id is the call id)."""
    state = part.get("state") or {}
    status = state.get("status", "pending")
    call_id = part.get("call_id", part["id"])
    tool: dict[str, Any] = {
        "type": f"tool-{part.get('tool', '')}",
        "toolCallId": call_id,
        "state": _TOOL_STATES.get(status, "input-streaming"),
        "input": state.get("input") if status != "pending" else None,
    }
    answer = (state.get("metadata") or {}).get("approval")
    if status == AWAITING:
        tool["state"] = "approval-requested" if approvals else "input-available"
        if approvals:
            tool["approval"] = {"id": call_id}
    elif status == "completed":
        tool["output"] = state.get("output", "")
    elif is_denied(state) and approvals:
        tool["state"] = "output-denied"
        tool["approval"] = {"id": call_id, "approved": False, "reason": denial_reason(state)}
    elif approvals and raw_input_of(state) is not None:  # as ai 6 folds tool-input-error
        del tool["input"]
        tool["rawInput"] = raw_input_of(state)
        tool["errorText"] = str(state.get("error") or "invalid tool input")
    elif status == "error":
        tool["input"] = state.get("input") or {}
        tool["errorText"] = str(state.get("error") or "tool failed")
    if approvals and status != AWAITING and not is_denied(state) and isinstance(answer, Mapping):
        tool["approval"] = {"id": call_id, "approved": True}
        if answer.get("reason"):
            tool["approval"]["reason"] = str(answer["reason"])
    return tool
