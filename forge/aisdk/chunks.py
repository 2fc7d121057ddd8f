"""Forge's frames as the AI SDK's UI message stream chunks: the one mapping.

Every chunk shape is declared once, below, as a builder. The shapes are the ones
that ``ai`` 5, 6 and 7 all accept (their ``uiMessageChunkSchema``); no field any
of them rejects is sent (``finishReason`` only from the values all three know).

:class:`ReplyChunks` follows one assistant message. It is fed Forge's frames of
the session in log order (``SessionStream``'s backlog, then live frames) and
answers the chunks to send, so that the client rebuilds that message:

* (before anything): ``start{messageId}``, the stored assistant message id;
* step-start part: ``start-step``; step-finish part: ``data-step-finish``
  ``{reason, tokens, cost}`` then ``finish-step``;
* text / reasoning part, new: ``text-start`` / ``reasoning-start`` (id = part id);
  ``part.delta`` and ``part.snapshot``: ``text-delta`` / ``reasoning-delta`` (only
  text the client lacks); ended: the text not sent yet, then ``*-end``;
* tool part: pending ``tool-input-start{toolCallId, toolName}``, running
  ``tool-input-available{toolCallId, toolName, input}``, completed
  ``tool-output-available{toolCallId, output}``, error ``tool-output-error``
  ``{toolCallId, errorText}``; awaiting-approval: its input, then (for a client that
  speaks approvals, ai 6 and 7) ``tool-approval-request{approvalId, toolCallId}`` with
  the call id as the approval id; denied (an error with ``metadata.denied``):
  ``tool-output-denied{toolCallId}`` for such a client, else ``tool-output-error``
  with the reason. ai 5 knows neither chunk (its schema rejects the stream), so it is
  sent neither: to it an awaiting tool is a tool with its input available. A call
  whose input is no JSON (``metadata.raw_input``) is, for the same ai 6+ clients,
  ``tool-input-error{toolCallId, toolName, input, errorText}`` with the raw input;
  for ai 5 ones, its input ``{}`` and a ``tool-output-error``;
* file part: ``file{url, mediaType}``;
* patch / subtask / agent parts, and a compaction part of any message logged
  during the reply: ``data-patch`` / ``data-subtask`` / ``data-agent`` /
  ``data-compaction`` (id = part id, data = the part's own fields);
* the message's completion: ``message-metadata`` then ``finish{finishReason}``; with
  an error, ``message-metadata``, ``error{errorText}`` and ``finish{error}``; a
  user's abort: ``abort``. A turn suspended on an approval (the message stays open,
  no process runs it) ends the stream with ``finish{tool-calls}``, as ``streamText``
  ends a step whose tool needs approval; the answer's request streams the rest of
  the same message (:mod:`forge.aisdk.approvals`).

Stages a client missed (a resumed stream starts from the message's first event,
and parts may be read whole) are emitted in order, so a tool's output never
comes without its input and a text's end never without its start. What a
text's end writes beyond the streamed text is sent as a last delta; a text the
end changed other than by trimming trailing white space (a ``text_complete``
hook) cannot be taken back in this protocol, so the client keeps what streamed;
trailing white space is never sent before more text follows it, so a trimmed
end matches.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

Chunk = dict[str, Any]

# finishReason values every major version of ``ai`` (5, 6, 7) accepts.
FINISH_REASONS = ("stop", "length", "content-filter", "tool-calls", "error", "other")
# The reason ``forge.runtime.finalize`` writes for a user's abort (the other
# ``MessageAbortedError``s, a crashed process's turn, are errors to the client).
ABORTED = "aborted"

# --- the chunk shapes -----------------------------------------------------------------


def start(message_id: str) -> Chunk:
    return {"type": "start", "messageId": message_id}


def start_step() -> Chunk:
    return {"type": "start-step"}


def finish_step() -> Chunk:
    return {"type": "finish-step"}


def block_start(kind: str, part_id: str) -> Chunk:
    """``text-start`` / ``reasoning-start``."""
    return {"type": f"{kind}-start", "id": part_id}


def block_delta(kind: str, part_id: str, delta: str) -> Chunk:
    """``text-delta`` / ``reasoning-delta``."""
    return {"type": f"{kind}-delta", "id": part_id, "delta": delta}


def block_end(kind: str, part_id: str) -> Chunk:
    """``text-end`` / ``reasoning-end``."""
    return {"type": f"{kind}-end", "id": part_id}


def tool_input_start(call_id: str, tool: str) -> Chunk:
    return {"type": "tool-input-start", "toolCallId": call_id, "toolName": tool}


def tool_input_available(call_id: str, tool: str, tool_input: Any) -> Chunk:
    return {
        "type": "tool-input-available",
        "toolCallId": call_id,
        "toolName": tool,
        "input": tool_input,
    }


def tool_input_error(call_id: str, tool: str, raw_input: str, error_text: str) -> Chunk:
    """A call whose input the model wrote as no JSON object: the SDK keeps the raw input
    (its part: ``output-error`` with ``rawInput``), not an ``{}`` that was never sent.
    ai 6+ only (ai 5.0.0's schema has no such chunk): sent to the clients that declare
    approvals (:mod:`forge.aisdk.approvals`), the others get ``{}`` and the error."""
    return {
        "type": "tool-input-error",
        "toolCallId": call_id,
        "toolName": tool,
        "input": raw_input,
        "errorText": error_text,
    }


def raw_input_of(state: Mapping[str, Any]) -> str | None:
    """The model's unparseable input of a call that ended for it (``tools.prepare_call``
    keeps it in ``metadata.raw_input``), else None."""
    raw = (state.get("metadata") or {}).get("raw_input")
    return raw if state.get("status") == "error" and isinstance(raw, str) else None


def tool_output_available(call_id: str, output: Any) -> Chunk:
    return {"type": "tool-output-available", "toolCallId": call_id, "output": output}


def tool_output_error(call_id: str, error_text: str) -> Chunk:
    return {"type": "tool-output-error", "toolCallId": call_id, "errorText": error_text}


def tool_approval_request(call_id: str) -> Chunk:
    """ai 6+: the approval id is the tool call id (Forge answers approvals by call id)."""
    return {"type": "tool-approval-request", "approvalId": call_id, "toolCallId": call_id}


def tool_output_denied(call_id: str) -> Chunk:
    """ai 6+: the call was denied (the reason is in the tool part's approval)."""
    return {"type": "tool-output-denied", "toolCallId": call_id}


def file(url: str, media_type: str) -> Chunk:
    return {"type": "file", "url": url, "mediaType": media_type}


def data(name: str, part_id: str, value: Any) -> Chunk:
    """``data-<name>``: a part with no native chunk; the id makes a client replace it
    when it changes rather than add another."""
    return {"type": f"data-{name}", "id": part_id, "data": value}


def message_metadata(metadata: Mapping[str, Any]) -> Chunk:
    return {"type": "message-metadata", "messageMetadata": dict(metadata)}


def finish(reason: Any) -> Chunk:
    return {"type": "finish", "finishReason": finish_reason(reason)}


def error(error_text: str) -> Chunk:
    return {"type": "error", "errorText": error_text}


def abort() -> Chunk:
    return {"type": "abort"}


def finish_reason(forge_finish: Any) -> str:
    """A Forge ``finish`` as a finishReason all versions accept (else ``other``)."""
    return forge_finish if forge_finish in FINISH_REASONS else "other"


def encode(chunk: Chunk) -> bytes:
    body = json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
    return f"data: {body}\n\n".encode()


DONE = b"data: [DONE]\n\n"

# --- one reply ------------------------------------------------------------------------

BLOCKS = ("text", "reasoning")
DATA_PARTS = {"patch": "patch", "subtask": "subtask", "agent": "agent", "compaction": "compaction"}
AWAITING = "awaiting-approval"
_TOOL_STAGES = {"pending": 1, AWAITING: 2, "running": 2, "completed": 3, "error": 3}


def is_denied(state: Mapping[str, Any]) -> bool:
    return state.get("status") == "error" and bool((state.get("metadata") or {}).get("denied"))


def is_awaiting(part: Mapping[str, Any]) -> bool:
    return part.get("type") == "tool" and (part.get("state") or {}).get("status") == AWAITING


def denial_reason(state: Mapping[str, Any]) -> str:
    approval = (state.get("metadata") or {}).get("approval") or {}
    reason = approval.get("reason") if isinstance(approval, Mapping) else None
    return str(reason or state.get("error") or "denied")


def data_of(part: Mapping[str, Any]) -> dict[str, Any]:
    skip = ("id", "message_id", "session_id", "type")
    return {key: value for key, value in part.items() if key not in skip}


class ReplyChunks:
    """The chunks of one assistant message, from the session's frames in log order."""

    def __init__(self, message_id: str, *, approvals: bool = False) -> None:
        self.message_id = message_id
        self.approvals = approvals  # the client speaks approvals (ai 6+)
        self.started = False
        self.done = False
        self.awaiting: set[str] = set()  # call ids of tools awaiting an approval
        self._kinds: dict[str, str] = {}  # open text/reasoning parts: part id -> kind
        self._texts: dict[str, str] = {}  # their text streamed so far
        self._shown: dict[str, int] = {}  # how much of it the client has
        self._ended: set[str] = set()
        # Text that streamed before its part's start event (the Processor holds a new
        # part's write for its next batch, while its deltas go out in their window):
        # part id -> the text from offset 0, shown once the start event opens the part.
        self._early: dict[str, str] = {}
        self._tools: dict[str, int] = {}  # tool part id -> stage sent (1 input, 2 available, 3 out)
        self._once: set[str] = set()  # step parts and files sent
        self._data: dict[str, str] = {}  # data part id -> its last value sent (JSON)

    def begin(self) -> list[Chunk]:
        if self.started:
            return []
        self.started = True
        return [start(self.message_id)]

    def accept(self, frame: Mapping[str, Any]) -> list[Chunk]:
        """The chunks for one Forge frame (nothing once the reply is done)."""
        if self.done:
            return []
        kind = frame.get("kind")
        if kind == "event":
            data = frame.get("data") or {}
            if frame.get("type") == "part.updated":
                if data.get("message_id") == self.message_id:
                    return self.part(data)
                if data.get("type") == "compaction":  # a boundary logged during the reply
                    return self._data_part("compaction", data)
            elif frame.get("type") == "message.updated" and data.get("id") == self.message_id:
                return self.message(data)
            return []
        if kind in ("delta", "snapshot") and frame.get("message_id") == self.message_id:
            if kind == "delta":
                return self.text(frame["part_id"], frame["offset"], frame["delta"])
            return self.text(frame["part_id"], 0, frame["text"])
        return []

    # --- parts ------------------------------------------------------------------------

    def part(self, part: Mapping[str, Any]) -> list[Chunk]:
        out = self.begin()
        part_type = part.get("type")
        part_id = part["id"]
        if part_type in BLOCKS:
            out += self._block(part)
        elif part_type == "tool":
            out += self._tool(part)
        elif part_type == "step-start":
            if part_id not in self._once:
                self._once.add(part_id)
                out.append(start_step())
        elif part_type == "step-finish":
            if part_id not in self._once:
                self._once.add(part_id)
                step = {k: part.get(k) for k in ("reason", "tokens", "cost")}
                out += [data("step-finish", part_id, step), finish_step()]
        elif part_type == "file":
            if part_id not in self._once:
                self._once.add(part_id)
                out.append(file(part.get("url", ""), part.get("mime", "")))
        elif part_type in DATA_PARTS:
            out += self._data_part(DATA_PARTS[part_type], part)
        return out

    def _block(self, part: Mapping[str, Any]) -> list[Chunk]:
        part_id, kind = part["id"], part["type"]
        if part_id in self._ended:
            return []
        out: list[Chunk] = []
        if part_id not in self._kinds:
            self._kinds[part_id] = kind
            self._texts[part_id] = ""
            self._shown[part_id] = 0
            out.append(block_start(kind, part_id))
            early = self._early.pop(part_id, "")
            if early:
                out += self.text(part_id, 0, early)
        if (part.get("time") or {}).get("end"):
            final = part.get("text") or ""
            shown = self._texts.pop(part_id)[: self._shown.pop(part_id)]
            if final.startswith(shown) and len(final) > len(shown):
                out.append(block_delta(kind, part_id, final[len(shown) :]))
            self._kinds.pop(part_id)
            self._ended.add(part_id)
            out.append(block_end(kind, part_id))
        return out

    def text(self, part_id: str, offset: int, delta: str) -> list[Chunk]:
        """Streamed text of an open part at ``offset``; only what the client lacks is sent.

        Trailing white space is held back until more text follows it: a part's
        end trims it, and the client could not take it back. Text of a part whose
        start event was not seen yet is kept (from offset 0, without holes) and
        shown when the start event opens the part; were it skipped, every later
        delta would be a hole here, which the stream below (that did pass the
        delta on) never repairs, and the client would see nothing of the part
        until its end."""
        kind = self._kinds.get(part_id)
        if kind is None:
            if part_id not in self._ended:
                early = self._early.get(part_id, "")
                if offset <= len(early) < offset + len(delta):
                    self._early[part_id] = early + delta[len(early) - offset :]
            return []
        streamed = self._texts[part_id]
        if offset > len(streamed) or offset + len(delta) <= len(streamed):
            return []  # a hole (the stream repairs it with a snapshot) or nothing new
        streamed += delta[len(streamed) - offset :]
        self._texts[part_id] = streamed
        shown, upto = self._shown[part_id], len(streamed.rstrip())
        if upto <= shown:
            return []
        self._shown[part_id] = upto
        return [*self.begin(), block_delta(kind, part_id, streamed[shown:upto])]

    def _tool(self, part: Mapping[str, Any]) -> list[Chunk]:
        state = part.get("state") or {}
        status = state.get("status")
        stage = _TOOL_STAGES.get(str(status), 0)
        have = self._tools.get(part["id"], 0)
        call_id, tool = part.get("call_id", part["id"]), part.get("tool", "")
        out: list[Chunk] = []
        if have < 1 <= stage:
            out.append(tool_input_start(call_id, tool))
        raw = raw_input_of(state)
        if raw is not None and have < 2 and self.approvals:  # ai 6+: ai 5.0.0 has no such chunk
            error = str(state.get("error") or "invalid tool input")
            self._tools[part["id"]] = stage
            return [*out, tool_input_error(call_id, tool, raw, error)]
        if have < 2 <= stage:
            out.append(tool_input_available(call_id, tool, state.get("input") or {}))
        if status == AWAITING:
            if self.approvals and call_id not in self.awaiting:
                out.append(tool_approval_request(call_id))
            self.awaiting.add(call_id)
        else:
            self.awaiting.discard(call_id)
        if have < 3 <= stage:
            if status == "completed":
                out.append(tool_output_available(call_id, state.get("output", "")))
            elif is_denied(state) and self.approvals:
                out.append(tool_output_denied(call_id))
            else:
                out.append(tool_output_error(call_id, str(state.get("error") or "tool failed")))
        self._tools[part["id"]] = max(have, stage)
        return out

    def seen(self, parts: list[Mapping[str, Any]]) -> None:
        """Take ``parts`` (the message as stored) as what the client has already: a
        continuation streams only what comes after them, from its own ``start``."""
        for part in parts:
            self.part(part)
        self.started = False

    def suspend(self) -> list[Chunk]:
        """The end of a stream whose turn waits for an approval (the message stays open)."""
        if self.done:
            return []
        self.done = True
        out = self.begin()
        for part_id, kind in list(self._kinds.items()):
            out.append(block_end(kind, part_id))
        self._kinds.clear()
        return [*out, finish("tool-calls")]

    def _data_part(self, name: str, part: Mapping[str, Any]) -> list[Chunk]:
        value = data_of(part)
        encoded = json.dumps(value, sort_keys=True, default=str)
        if self._data.get(part["id"]) == encoded:
            return []
        self._data[part["id"]] = encoded
        return [*self.begin(), data(name, part["id"], value)]

    # --- the end ----------------------------------------------------------------------

    def message(self, info: Mapping[str, Any]) -> list[Chunk]:
        """The message's own updates: its completion ends the stream."""
        out = self.begin()
        if not info.get("completed_at"):
            return out
        self.done = True
        # Parts still open (none after a clean finish or a finalize) end here.
        for part_id, kind in list(self._kinds.items()):
            out.append(block_end(kind, part_id))
        self._kinds.clear()
        self._texts.clear()
        self._shown.clear()
        failure = info.get("error")
        if failure and (failure.get("name"), failure.get("message")) == (
            "MessageAbortedError",
            ABORTED,
        ):
            return [*out, abort()]
        out.append(message_metadata(metadata_of(info)))
        if failure:
            text = f"{failure.get('name', 'Error')}: {failure.get('message', '')}"
            return [*out, error(text), finish("error")]
        return [*out, finish(info.get("finish"))]


def metadata_of(info: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("finish", "tokens", "cost", "error", "created_at", "completed_at", "model", "agent")
    return {key: info[key] for key in keys if key in info}
