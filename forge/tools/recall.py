"""The recall tools: the model gets back what the projection dropped.

* ``history_search``: full-text search over this session's whole history
  (including everything compaction and pruning hid), ranked, with message ids;
* ``history_read``: messages by id or id range, with their parts (output capped);
  with ``part_id`` and ``offset``, one tool part's whole output page by page
  (read from its file when it was over the log's cap), so nothing the model was
  shown cut is out of its reach.

Both read the store (``sessions.recall``) on the runtime's database thread. They live
with the other tools and, like them, import nothing of ``forge.runtime``: what they
need (the session, the tenant) comes through the ``ToolContext``.
"""

from __future__ import annotations

import json
from typing import Any

from forge.db.worker import db
from sessions.exceptions import InvalidCursor
from sessions.models import Session
from sessions.recall import SearchHit, message_of_part, read_messages, search_history

from .base import INT_ARG_MAX, ToolContext, ToolError, ToolResult
from .registry import tool
from .session_files import whole_output

READ_MAX_CHARS = 20_000  # the whole output of one history_read
PART_MAX_CHARS = 4_000  # one part's text or output within it
OUTPUT_PAGE_CHARS = 40_000  # one page of a tool part's whole output (part_id + offset)


def _session(ctx: ToolContext) -> Session:
    return Session.objects.select_related("tenant").get(pk=ctx.session_id, tenant_id=ctx.tenant_id)


@tool(
    name="history_search",
    description=(
        "Search this conversation's whole history, including earlier turns that were "
        "summarized or whose tool outputs were pruned from your context. Returns the best "
        "matches with their message ids; read them in full with history_read."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words to look for (all must match)"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
async def history_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    def search() -> list[SearchHit]:
        session = _session(ctx)
        return search_history(
            tenant=session.tenant,
            session=session,
            query=str(args["query"]),
            limit=int(args.get("limit") or 10),
            skip=ctx.message_id,  # the reply calling: its own call holds the query
        )

    try:
        hits = await db(search)()
    except InvalidCursor as exc:
        raise ToolError(str(exc)) from None
    if not hits:
        return ToolResult(output="no match", title="history_search: no match")
    lines = [
        f"{n}. message {hit.message_id} ({hit.role}), part {hit.part_id}: {hit.snippet}"
        for n, hit in enumerate(hits, start=1)
    ]
    return ToolResult(
        output="\n".join(lines),
        title=f"history_search: {len(hits)} match(es)",
        metadata={"message_ids": [hit.message_id for hit in hits]},
    )


def _clip(text: str, cap: int = PART_MAX_CHARS) -> str:
    return text if len(text) <= cap else text[:cap] + f" … [{len(text) - cap} more characters]"


def _render_part(part: dict[str, Any]) -> str | None:
    kind = part.get("type")
    if kind in ("text", "reasoning"):
        return f"[{kind}] {_clip(str(part.get('text', '')))}"
    if kind == "tool":
        state = part.get("state") or {}
        arguments = json.dumps(state.get("input", {}), ensure_ascii=False)
        head = f"[tool {part.get('tool')} {_clip(arguments, 500)}] ({state.get('status')})"
        if state.get("status") == "completed":
            return f"{head}\n{_clip(str(state.get('output', '')))}"
        if state.get("status") == "error":
            return f"{head}\nError: {_clip(str(state.get('error', '')))}"
        return head
    if kind == "file":
        return f"[file {part.get('filename')} ({part.get('mime')})]"
    if kind == "compaction":
        return "[compaction: the history before this point was summarized]"
    if kind == "subtask":
        return f"[subtask {part.get('agent')}] {_clip(str(part.get('prompt', '')), 500)}"
    return None


@tool(
    name="history_read",
    description=(
        "Read messages of this conversation in full, with their parts: by message id "
        "(ids), or a range of message ids (start, and optionally end). history_search "
        "gives the ids; a pruned tool output names its part id (part_id reads its message). "
        "With part_id and offset: that tool part's whole output from that character on, "
        "a page at a time (a truncated output says how long it is)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": {"type": "string"}, "maxItems": 50},
            "start": {"type": "string"},
            "end": {"type": "string"},
            "part_id": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0, "maximum": INT_ARG_MAX},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
        },
        "additionalProperties": False,
    },
)
async def history_read(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    if args.get("offset") is not None:
        if not args.get("part_id"):
            raise ToolError("offset reads a tool part's output: give its part_id too")
        return await _output_page(ctx, str(args["part_id"]), int(args["offset"]))

    def read() -> list[dict[str, Any]]:
        session = _session(ctx)
        ids = args.get("ids")
        if args.get("part_id"):
            owner = message_of_part(
                tenant=session.tenant, session=session, part_id=str(args["part_id"])
            )
            if owner is None:
                raise InvalidCursor(f"no part {args['part_id']!r} in this conversation")
            ids = [owner]
        return read_messages(
            tenant=session.tenant,
            session=session,
            ids=[str(i) for i in ids] if ids is not None else None,
            start=args.get("start"),
            end=args.get("end"),
            limit=int(args.get("limit") or 10),
        )

    try:
        items = await db(read)()
    except InvalidCursor as exc:
        raise ToolError(str(exc)) from None
    if not items:
        return ToolResult(output="no such messages", title="history_read: nothing")
    blocks: list[str] = []
    for item in items:
        info = item["info"]
        label = " (summary)" if info.get("summary") else ""
        rendered = [r for p in item["parts"] if (r := _render_part(p)) is not None]
        blocks.append(f"## message {info['id']} ({info['role']}{label})\n" + "\n".join(rendered))
    output = "\n\n".join(blocks)
    if len(output) > READ_MAX_CHARS:
        output = output[:READ_MAX_CHARS] + "\n… [output capped; read fewer messages at once]"
    return ToolResult(output=output, title=f"history_read: {len(items)} message(s)")


def _spilled_to(part: dict[str, Any]) -> str | None:
    """The id of the file part a tool part's output was stored in, if any."""
    if part.get("type") != "tool":
        return None
    stored = ((part.get("state") or {}).get("metadata") or {}).get("output_file") or {}
    return stored.get("part_id") if isinstance(stored, dict) else None


async def _output_page(ctx: ToolContext, part_id: str, offset: int) -> ToolResult:
    """A page of tool part ``part_id``'s whole output, from character ``offset``."""

    def read() -> str:
        session = _session(ctx)
        owner = message_of_part(tenant=session.tenant, session=session, part_id=part_id)
        items = (
            read_messages(tenant=session.tenant, session=session, ids=[owner])
            if owner is not None
            else []
        )
        everything = [p for item in items for p in item["parts"]]
        parts = [p for p in everything if p.get("id") == part_id]
        if parts and parts[0].get("type") == "file":
            # The file an output over the log's limit was stored in (its note names it):
            # read as the tool part that names it (QA: the model was told of this id only).
            parts = [p for p in everything if _spilled_to(p) == part_id]
        if not parts or parts[0].get("type") != "tool":
            raise InvalidCursor(f"no tool part {part_id!r} in this conversation")
        if (parts[0].get("state") or {}).get("status") != "completed":
            raise InvalidCursor(f"tool part {part_id!r} has no output")
        return whole_output(session, parts[0])

    try:
        output = await db(read)()
    except InvalidCursor as exc:
        raise ToolError(str(exc)) from None
    total = len(output)
    end = min(offset + OUTPUT_PAGE_CHARS, total)
    page = output[offset:end] if offset < total else ""
    trailer = f"\n\n[characters {min(offset, total)}-{end} of {total}"
    trailer += f"; offset {end} reads on]" if end < total else "; the end]"
    return ToolResult(
        output=page + trailer,
        title=f"history_read: output of {part_id}",
        metadata={"offset": offset, "end": end, "total": total},
    )
