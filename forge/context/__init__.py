"""What the model sees, derived from the log every turn (``derive_messages``).

Two inputs, both read from the store: the history (messages with their parts)
and the context blocks logged by ``context.updated`` events. Nothing reaches
the model that is not in the log, so the same functions run on an exported log
replay what the model was sent.

:func:`request_for` is the one way a request is made: the run loop before each
step, the ``context/`` route, and replay all call it.

Context blocks: each ``context.updated`` event carries ``{"blocks": [...]}``;
a block is ``{"kind", "key", ...}`` and replaces the earlier block of the same
kind and key (``"removed": true`` drops it; ``sessions.projector.fold_context``
is that fold). Kinds used by the runtime:

* ``system`` (``text``): a system prompt (the agent's, key ``agent``);
* ``tools`` (``tools``: a list of ``{name, description, parameters}``);
* ``settings`` (``model``, ``temperature``): how the model is called.

Other kinds (memory's ``dialog_history``, later) reach the model as extra
system text, after the agent's prompt.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings

from forge.providers.base import ModelRequest, ToolSpec
from sessions import selectors
from sessions.exceptions import InvalidCursor
from sessions.models import Session
from sessions.projector import fold_context

from .compacted import filter_compacted, find_boundary
from .pruning import is_pruned, placeholder
from .superseded import drop_superseded

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
        info, parts = item["info"], item["parts"]
        if info["role"] == "user":
            content = _user_content(parts)
            if content:
                messages.append({"role": "user", "content": content})
        else:
            messages.extend(_assistant_messages(parts))
    return messages


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
                        "arguments": json.dumps(p["state"].get("input", {}), ensure_ascii=False),
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
        return str(state["output"])
    if state["status"] == "error":
        return f"Error: {state['error']}"
    return "Error: the tool call was interrupted"


def build_request(
    *, blocks: Mapping[str, Mapping[str, Any]], history: Iterable[Mapping[str, Any]], model: str
) -> ModelRequest:
    """The model request for a turn: logged context blocks + derived history."""
    system = [b["text"] for b in blocks.values() if b.get("kind") == "system" and b.get("text")]
    extra = [
        _block_text(b)
        for b in blocks.values()
        if b.get("kind") not in ("system", "tools", "settings")
    ]
    tools_block = next((b for b in blocks.values() if b.get("kind") == "tools"), None)
    settings_block = next((b for b in blocks.values() if b.get("kind") == "settings"), {})
    tools = [ToolSpec(**spec) for spec in (tools_block or {}).get("tools", [])]
    return ModelRequest(
        model=model,
        system=system + [text for text in extra if text],
        messages=derive_messages(history),
        tools=tools,
        temperature=settings_block.get("temperature"),
    )


def _block_text(block: Mapping[str, Any]) -> str:
    if isinstance(block.get("text"), str):
        return str(block["text"])
    body = {k: v for k, v in block.items() if k not in ("kind", "key")}
    return f"<{block.get('kind')}>\n{json.dumps(body, ensure_ascii=False)}\n</{block.get('kind')}>"


def request_for(session: Session, *, at: int | None = None) -> tuple[str, ModelRequest]:
    """``(provider/model, request)``: exactly what the model is sent for the session's
    next step, derived from the log alone: at its end, or as of event ``at``.

    The model is the one the logged ``settings`` block names (``FORGE_MODEL``
    before any turn logged one).
    """
    tenant = session.tenant
    if at is None:
        history = visible_history(session)
        updates = selectors.context_updates(tenant=tenant, session=session)
    else:
        head = selectors.head_seq(tenant=tenant, session_id=session.pk)
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at <= head:
            raise InvalidCursor(f"at must be a seq from 0 to {head} (the log's head), not {at!r}")
        history = filter_compacted(selectors.history_at(tenant=tenant, session=session, seq=at))
        updates = selectors.context_updates(tenant=tenant, session=session, upto_seq=at)
    blocks = fold_context(updates)
    model = blocks.get("settings:agent", {}).get("model") or settings.FORGE_MODEL
    _, _, name = model.partition("/")
    return model, build_request(blocks=blocks, history=history, model=name)


def visible_history(session: Session) -> list[dict[str, Any]]:
    """The history the model sees at the log's end (:func:`filter_compacted`).

    The read starts at the newest boundary that a ``session.compacted`` marker
    names (its kept tail, else its compaction message): what is older is never
    read, so the cost does not grow with the history behind the boundary. A
    marker whose boundary is gone (its messages removed) falls back to the
    whole history.
    """
    tenant = session.tenant
    marker = selectors.last_compaction(tenant=tenant, session=session)
    start = None
    if marker is not None:
        ids = [marker.get("tail_start_id"), marker.get("parent_id")]
        start = min((str(i) for i in ids if i), default=None)
    history = list(selectors.iter_history(tenant=tenant, session_id=session.pk, since=start))
    if start is not None and find_boundary(history) is None:
        history = list(selectors.iter_history(tenant=tenant, session_id=session.pk))
    return filter_compacted(history)
