"""A client of the UI message stream for tests: every chunk checked against the fields
``ai`` 5, 6 and 7 all accept, and folded into the ``UIMessage`` the AI SDK would
build (``processUIMessageStream``), refusing chunks out of order."""

from __future__ import annotations

import json
from typing import Any

# type -> (required fields, optional fields), the intersection of ai 5/6/7's schemas.
SHAPES: dict[str, tuple[set[str], set[str]]] = {
    "start": (set(), {"messageId", "messageMetadata"}),
    "start-step": (set(), set()),
    "finish-step": (set(), set()),
    "text-start": ({"id"}, {"providerMetadata"}),
    "text-delta": ({"id", "delta"}, {"providerMetadata"}),
    "text-end": ({"id"}, {"providerMetadata"}),
    "reasoning-start": ({"id"}, {"providerMetadata"}),
    "reasoning-delta": ({"id", "delta"}, {"providerMetadata"}),
    "reasoning-end": ({"id"}, {"providerMetadata"}),
    "tool-input-start": ({"toolCallId", "toolName"}, {"providerExecuted", "dynamic"}),
    "tool-input-delta": ({"toolCallId", "inputTextDelta"}, set()),
    "tool-input-available": ({"toolCallId", "toolName", "input"}, {"dynamic"}),
    "tool-output-available": ({"toolCallId", "output"}, {"dynamic", "preliminary"}),
    "tool-output-error": ({"toolCallId", "errorText"}, {"dynamic"}),
    "file": ({"url", "mediaType"}, {"providerMetadata"}),
    "data-*": ({"data"}, {"id", "transient"}),
    "message-metadata": ({"messageMetadata"}, set()),
    "finish": (set(), {"finishReason", "messageMetadata"}),
    "error": ({"errorText"}, set()),
    "abort": (set(), set()),
}
FINISH_REASONS = {"stop", "length", "content-filter", "tool-calls", "error", "other"}
# Approvals: ai 6 and 7 only (ai 5's schema rejects them), sent to clients that declare
# them (forge.aisdk.approvals).
APPROVAL_SHAPES: dict[str, tuple[set[str], set[str]]] = {
    "tool-approval-request": ({"approvalId", "toolCallId"}, set()),
    "tool-output-denied": ({"toolCallId"}, set()),
    # not in ai 5.0.0's schema either: sent to the same clients
    "tool-input-error": ({"toolCallId", "toolName", "input", "errorText"}, {"dynamic"}),
}


def check(chunk: dict[str, Any], approvals: bool = False) -> None:
    kind = chunk["type"]
    key = "data-*" if kind.startswith("data-") else kind
    shapes = {**SHAPES, **APPROVAL_SHAPES} if approvals else SHAPES
    assert key in shapes, f"unknown chunk type {kind!r}"
    required, optional = shapes[key]
    fields = set(chunk) - {"type"}
    assert required <= fields, f"{kind}: missing {required - fields}"
    assert fields <= required | optional, (
        f"{kind}: fields no version accepts {fields - required - optional}"
    )
    if kind == "finish" and "finishReason" in chunk:
        assert chunk["finishReason"] in FINISH_REASONS, chunk


class UIMessage:
    """The assistant message a client builds from a stream."""

    def __init__(self, approvals: bool = False) -> None:
        self.approvals = approvals
        self.id: str | None = None
        self.parts: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {}
        self.active: dict[str, dict[str, Any]] = {}  # open text/reasoning parts by id
        self.tools: dict[str, dict[str, Any]] = {}
        self.end: str | None = None  # "finish" | "error" | "abort"
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.types: list[str] = []

    def respond(self, call_id: str, approved: bool) -> None:
        """``addToolApprovalResponse``: the client's own step, and a new stream may follow."""
        tool = self.tools[call_id]
        assert tool["state"] == "approval-requested", tool
        tool.update(state="approval-responded", approval={"id": call_id, "approved": approved})
        self.end = None

    def apply(self, chunk: dict[str, Any]) -> None:
        check(chunk, self.approvals)
        kind = chunk["type"]
        self.types.append(kind)
        assert self.end in (None, "error") or (kind == "finish" and self.end == "error"), (
            f"{kind} after the stream ended ({self.end})"
        )
        if kind == "start":
            assert not self.parts or chunk.get("messageId") in (None, self.id)
            self.id = chunk.get("messageId", self.id)
        elif kind == "start-step":
            self.parts.append({"type": "step-start"})
        elif kind == "finish-step":
            self.active.clear()
        elif kind in ("text-start", "reasoning-start"):
            assert chunk["id"] not in self.active, f"{kind} twice for {chunk['id']}"
            part = {"type": kind.split("-")[0], "text": ""}
            self.active[chunk["id"]] = part
            self.parts.append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            part = self.active[chunk["id"]]  # a KeyError is a delta without its start
            assert part["type"] == kind.split("-")[0]
            part["text"] += chunk["delta"]
        elif kind in ("text-end", "reasoning-end"):
            self.active.pop(chunk["id"])
        elif kind == "tool-input-start":
            assert chunk["toolCallId"] not in self.tools
            tool = {
                "type": f"tool-{chunk['toolName']}",
                "toolCallId": chunk["toolCallId"],
                "state": "input-streaming",
                "input": None,
            }
            self.tools[chunk["toolCallId"]] = tool
            self.parts.append(tool)
        elif kind == "tool-input-available":
            tool = self.tools[chunk["toolCallId"]]
            tool.update(state="input-available", input=chunk["input"])
        elif kind == "tool-input-error":  # as ai's processUIMessageStream folds it
            tool = self.tools[chunk["toolCallId"]]
            assert tool["state"] == "input-streaming", tool
            del tool["input"]
            tool.update(state="output-error", rawInput=chunk["input"], errorText=chunk["errorText"])
        elif kind == "tool-approval-request":
            tool = self.tools[chunk["toolCallId"]]
            assert tool["state"] == "input-available", tool
            tool.update(state="approval-requested", approval={"id": chunk["approvalId"]})
        elif kind in ("tool-output-available", "tool-output-error", "tool-output-denied"):
            tool = self.tools[chunk["toolCallId"]]
            assert tool["state"] in ("input-available", "approval-responded"), tool
            if kind == "tool-output-available":
                tool.update(state="output-available", output=chunk["output"])
            elif kind == "tool-output-error":
                tool.update(state="output-error", errorText=chunk["errorText"])
            else:
                assert tool["state"] == "approval-responded", tool
                tool.update(state="output-denied")
        elif kind == "file":
            self.parts.append(
                {"type": "file", "url": chunk["url"], "mediaType": chunk["mediaType"]}
            )
        elif kind.startswith("data-"):
            part = {"type": kind, "id": chunk.get("id"), "data": chunk["data"]}
            for index, existing in enumerate(self.parts):
                if existing["type"] == kind and existing.get("id") == part["id"] is not None:
                    self.parts[index] = part
                    break
            else:
                self.parts.append(part)
        elif kind == "message-metadata":
            self.metadata.update(chunk["messageMetadata"])
        elif kind == "finish":
            self.end = "finish" if self.end is None else self.end
            self.finish_reason = chunk.get("finishReason")
        elif kind == "error":
            self.end, self.error = "error", chunk["errorText"]
        elif kind == "abort":
            self.end = "abort"


def expected_parts(stored: dict[str, Any]) -> list[dict[str, Any]]:
    """What the client's parts should be for a stored Forge message ``{info, parts}``."""
    out: list[dict[str, Any]] = []
    for part in stored["parts"]:
        kind = part["type"]
        if kind in ("text", "reasoning"):
            out.append({"type": kind, "text": part["text"]})
        elif kind == "step-start":
            out.append({"type": "step-start"})
        elif kind == "step-finish":
            data = {k: part[k] for k in ("reason", "tokens", "cost")}
            out.append({"type": "data-step-finish", "id": part["id"], "data": data})
        elif kind == "tool":
            state = part["state"]
            tool = {
                "type": f"tool-{part['tool']}",
                "toolCallId": part["call_id"],
                "input": state.get("input", {}),
            }
            if state["status"] == "completed":
                tool.update(state="output-available", output=state["output"])
            else:
                tool.update(state="output-error", errorText=state["error"])
            out.append(tool)
        elif kind == "file":
            out.append({"type": "file", "url": part["url"], "mediaType": part["mime"]})
        else:
            data = {
                k: v for k, v in part.items() if k not in ("id", "message_id", "session_id", "type")
            }
            out.append({"type": f"data-{kind}", "id": part["id"], "data": data})
    return out


def parse_sse(body: str) -> list[dict[str, Any] | str]:
    """The ``data:`` payloads of an SSE body (JSON, or the literal ``[DONE]``)."""
    out: list[dict[str, Any] | str] = []
    for event in body.split("\n\n"):
        lines = [line[6:] for line in event.split("\n") if line.startswith("data: ")]
        if lines:
            data = "\n".join(lines)
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
