"""The model's messages derived from the history, and the request around them.

:func:`derive_messages` turns the visible history (``[{info, parts}]``, oldest
first) into Chat Completions messages; :func:`build_request` adds what the
logged context blocks say (system text, tools, settings). Pure functions of
their inputs: the same history gives the same bytes, whoever calls them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings

from forge.providers.base import ModelRequest, ToolSpec

from .pruning import is_pruned, placeholder
from .superseded import drop_superseded
from .tool_output import model_output

# What a compaction user message says to the model (its ``compaction`` part has no text).
COMPACTION_PROMPT = "What did we do so far? Summarize the conversation for continuing it."


def derive_messages(history: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages: ``history`` is ``[{info, parts}]``,
    oldest first. An assistant message becomes one assistant message per step
    (steps start at ``step-start`` parts), each followed by its tool results.
    Reasoning is not sent back; a text file's content arrives as a synthetic
    text part of the user message, so it is part of the log. A reply superseded by
    a regenerated one is left out (:mod:`forge.context.superseded`).
    """
    messages: list[dict[str, Any]] = []
    for item in drop_superseded(history):
        messages.extend(item_messages(item))
    return messages


def item_messages(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What one history item ``{info, parts}`` becomes in :func:`derive_messages`: it
    depends on that item alone, which is what lets :mod:`forge.context.derived`
    re-render only the messages an event touched."""
    info, parts = item["info"], item["parts"]
    if info["role"] == "user":
        content = _user_content(parts)
        return [{"role": "user", "content": content}] if content else []
    return _assistant_messages(parts)


def _user_content(parts: list[Mapping[str, Any]]) -> str:
    pieces: list[str] = []
    inlined = {p.get("text", "") for p in parts if p["type"] == "text" and p.get("synthetic")}
    for part in parts:
        if part["type"] == "text" and part["text"]:
            pieces.append(part["text"])
        elif part["type"] == "compaction":
            pieces.append(COMPACTION_PROMPT)
        elif part["type"] == "file":
            name = part.get("filename") or part["url"]
            if not any(f'name="{name}"' in text for text in inlined):
                pieces.append(f"[attached file: {name} ({part['mime']})]")
    return "\n\n".join(pieces)


def _assistant_messages(parts: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    steps: list[list[Mapping[str, Any]]] = []
    for part in parts:
        if part["type"] == "step-start" or not steps:
            steps.append([])
        steps[-1].append(part)
    out: list[dict[str, Any]] = []
    for step in steps:
        text = "".join(p["text"] for p in step if p["type"] == "text")
        tools = [p for p in step if p["type"] == "tool"]
        if not text and not tools:
            continue  # a step that produced nothing the model is sent (failed, reasoning only)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if tools:
            message["tool_calls"] = [
                {
                    "id": p["call_id"],
                    "type": "function",
                    "function": {
                        "name": p["tool"],
                        "arguments": json.dumps(
                            p["state"].get("input", {}), ensure_ascii=False, sort_keys=True
                        ),
                    },
                }
                for p in tools
            ]
        out.append(message)
        for p in tools:
            out.append({"role": "tool", "tool_call_id": p["call_id"], "content": _tool_result(p)})
    return out


def _tool_result(part: Mapping[str, Any]) -> str:
    state = part["state"]
    if is_pruned(part):
        return placeholder(part)
    if state["status"] == "completed":
        return model_output(part)
    if state["status"] == "error":
        return f"Error: {state['error']}"
    if state["status"] == "awaiting-approval":
        # Only a preview shows it (GET …/context/): a turn never asks the model while a
        # call waits, and a new prompt denies the call first (docs/approvals.md).
        return "Error: the tool call is waiting for the user's approval"
    return "Error: the tool call was interrupted"


def build_request(
    *, blocks: Mapping[str, Mapping[str, Any]], history: Iterable[Mapping[str, Any]], model: str
) -> ModelRequest:
    """The model request for a turn: logged context blocks + derived history."""
    return request_with(blocks=blocks, messages=derive_messages(history), model=model)


def request_with(
    *,
    blocks: Mapping[str, Mapping[str, Any]],
    messages: list[dict[str, Any]],
    model: str,
    messages_chars: int | None = None,
) -> ModelRequest:
    """The model request from logged context blocks and already derived messages
    (``messages_chars``: their JSON length, when the caller knows it)."""
    system = [b["text"] for b in blocks.values() if b.get("kind") == "system" and b.get("text")]
    extra = [
        _block_text(b)
        for b in blocks.values()
        if b.get("kind") not in ("system", "tools", "settings")
    ]
    # The agent's blocks, the ones the runtime sets (and ``model_of`` reads): the first
    # of any key was taken, so an imported log's own ``tools`` block set before them
    # was what the model was offered on every later turn (QA).
    tools_block = blocks.get("tools:agent")
    settings_block = blocks.get("settings:agent") or {}
    tools = [ToolSpec(**spec) for spec in (tools_block or {}).get("tools", [])]
    return ModelRequest(
        model=model,
        system=system + [text for text in extra if text],
        messages=messages,
        tools=tools,
        temperature=settings_block.get("temperature"),
        messages_chars=messages_chars,
    )


def _block_text(block: Mapping[str, Any]) -> str:
    if isinstance(block.get("text"), str):
        return str(block["text"])
    body = {k: v for k, v in block.items() if k not in ("kind", "key")}
    return f"<{block.get('kind')}>\n{json.dumps(body, ensure_ascii=False)}\n</{block.get('kind')}>"


def model_of(blocks: Mapping[str, Mapping[str, Any]]) -> str:
    """``provider/model``: the one the logged ``settings`` block names (``FORGE_MODEL``
    before any turn logged one)."""
    return str(blocks.get("settings:agent", {}).get("model") or settings.FORGE_MODEL)
