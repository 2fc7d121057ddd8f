"""The model's long-term memory tools: ``memory_search`` and ``memory_read``.

Both see one memory only: the core of the turn's speaker (the user who sent the
prompt or asked for the regeneration, whoever owns the session; CONTRACT §2)
with the agent that runs the call (``ToolContext.agent``), in the session's
tenant. The speaker is read from the log: the ``user_id`` of the reply the call
belongs to (``ToolContext.message_id``). A slice or unit of another user,
another agent or another tenant is answered exactly like a missing one (a tool
error), never with its data.

* ``memory_search {query, limit?}``: slices that match by their summary or their
  raw messages, in words or in meaning (hybrid search, ``memory.search``), best
  first, as text: rank, slice id, unit id, the message range ``[start, end)``,
  the summary (cut at :data:`SUMMARY_MAX_CHARS`), then the best-matching
  messages inside the slice, one line each: ``[index] role (time): snippet``,
  so the model can quote them and open ``memory_read {unit_id, start, end}``
  at that index. ``limit`` 1..20, default 5. No score: the order is all there
  is, and it depends on the speaker's memory alone.
* ``memory_read {slice_id}`` or ``{unit_id, start?, end?}``: the raw messages of
  the slice's range, or of the unit's ``[start, end)`` (``start`` default 0,
  ``end`` default ``start + READ_MAX_MESSAGES``), at most
  :data:`READ_MAX_MESSAGES` messages and :data:`READ_MAX_CHARS` characters per
  call; a cut answer ends with a note telling where to continue.

The tools are async and run their database work on the runtime's database thread
(``forge.db.worker``: one connection, closed at shutdown), never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accounts.exceptions import ForgeError
from accounts.models import Tenant
from forge.db.worker import aside
from memory import selectors as memory
from memory.models import MemorySlice, MemoryUnit
from memory.search import QUERY_MAX
from memory.times import format_time
from sessions import selectors as sessions

from .base import INT_ARG_MAX, ToolContext, ToolError, ToolResult
from .registry import tool

SEARCH_DEFAULT = 5
SEARCH_MAX = 20
SUMMARY_MAX_CHARS = 1_000
READ_MAX_MESSAGES = 200
READ_MAX_CHARS = 20_000

ID = {"type": "string", "minLength": 1, "maxLength": 64}


@dataclass(frozen=True)
class Scope:
    """Whose memory a call may see: (tenant, the turn's speaker, agent)."""

    tenant: Tenant
    user: Any
    agent: str

    def owns(self, unit: MemoryUnit) -> bool:
        core = unit.core
        return (
            core.tenant_id == self.tenant.pk
            and core.user_id == self.user.pk
            and core.agent == self.agent
        )


def scope_of(ctx: ToolContext) -> Scope:
    """The memory this call may see; a ``ToolError`` when the session has none."""
    tenant = Tenant.objects.filter(pk=ctx.tenant_id).first()
    if tenant is None:
        raise ToolError("long-term memory is unavailable: the session's tenant is gone")
    try:
        session = sessions.get_session(tenant=tenant, session_id=ctx.session_id)
    except ForgeError as exc:
        raise ToolError(f"long-term memory is unavailable: {exc}") from None
    speaker = sessions.speaker(tenant=tenant, session=session, message_id=ctx.message_id)
    if speaker is None:
        raise ToolError("long-term memory is unavailable: this turn has no speaker")
    return Scope(tenant=tenant, user=speaker, agent=ctx.agent)


async def off_the_loop(
    function: Callable[[ToolContext, dict[str, Any]], ToolResult],
    ctx: ToolContext,
    args: dict[str, Any],
) -> ToolResult:
    """Run ``function`` off the event loop, beside the runtime's database thread
    (``forge.db.worker.aside``): a search may wait on the embedding server, and on that
    thread it held up every turn of the process (QA)."""

    result: ToolResult = await aside(function)(ctx, args)
    return result


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- memory_search ------------------------------------------------------------------------


def search_memory(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """``memory_search``, synchronously (the tool runs it off the event loop)."""
    scope = scope_of(ctx)
    query = args.get("query")
    limit = args.get("limit", SEARCH_DEFAULT)
    if not isinstance(query, str):
        raise ToolError('give the words to look for: {"query": "…"}')
    try:
        hits = memory.search_slices(
            tenant=scope.tenant, query=query, user=scope.user, agent=scope.agent, limit=limit
        )
    except ForgeError as exc:
        raise ToolError(str(exc)) from None
    shown = _cut(str(query), 80)
    if not hits:
        return ToolResult(
            output=f"No memory matches {shown!r}.",
            title=f"memory search: {shown}",
            metadata={"count": 0, "slice_ids": []},
        )
    lines = [f"{len(hits)} memory slice{'s' if len(hits) != 1 else ''} for {shown!r}, best first:"]
    if not any(hit.by_words for hit in hits):
        lines[0] = (
            f"No memory holds the words of {shown!r}. The {len(hits)} nearest by meaning, "
            "which may be unrelated:"
        )
    for hit in hits:
        item = hit.slice
        lines.append(
            f"{hit.rank}. slice {item.pk} | unit {item.unit_id} "
            f"| messages [{item.start_index}, {item.end_index}) "
            f"| {format_time(item.created_at)}" + ("" if hit.by_words else " | by meaning only")
        )
        lines.append("   " + _cut(item.summary, SUMMARY_MAX_CHARS).replace("\n", "\n   "))
        for found in hit.messages:
            message = found.message
            lines.append(
                f"   [{message.index}] {message.role} ({format_time(message.at)}): {found.snippet}"
            )
    lines.append(
        'Read the messages behind a slice with memory_read {"slice_id": "…"}, '
        'or a range of a unit with {"unit_id": "…", "start": N, "end": M}.'
    )
    return ToolResult(
        output="\n".join(lines),
        title=f"memory search: {shown}",
        metadata={
            "count": len(hits),
            "slice_ids": [hit.slice.pk for hit in hits],
            "messages": [[m.index for m in hit.messages] for hit in hits],
        },
    )


@tool(
    name="memory_search",
    description=(
        "Search your long-term memory of earlier conversations with this user, by words "
        "and by meaning: the best-matching stretches of past dialogue (slices), best "
        "first, each with its slice id, unit id, message range and summary, and the "
        "messages inside it that match best ([index] role (time): snippet). Any word of "
        "the query may match; no query syntax. Use memory_read to see whole messages."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": QUERY_MAX,
                "description": "Words to look for.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": SEARCH_MAX,
                "description": f"How many slices, at most {SEARCH_MAX}. Default {SEARCH_DEFAULT}.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)
async def memory_search(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return await off_the_loop(search_memory, ctx, args)


# --- memory_read --------------------------------------------------------------------------


def _unit_in_scope(scope: Scope, unit_id: str) -> MemoryUnit:
    try:
        unit = memory.get_unit(tenant=scope.tenant, unit_id=unit_id)
    except ForgeError as exc:
        raise ToolError(str(exc)) from None
    if not scope.owns(unit):
        raise ToolError(f"no memory unit {unit_id!r}")
    return unit


def _slice_in_scope(scope: Scope, slice_id: str) -> MemorySlice:
    try:
        item = memory.get_slice(tenant=scope.tenant, slice_id=slice_id)
    except ForgeError as exc:
        raise ToolError(str(exc)) from None
    if not scope.owns(item.unit):
        raise ToolError(f"no memory slice {slice_id!r}")
    return item


def _range(args: dict[str, Any]) -> tuple[int, int]:
    start = args.get("start", 0)
    end = args.get("end")
    if end is None:
        end = start + READ_MAX_MESSAGES
    if end < start:
        raise ToolError(f"end ({end}) must not be below start ({start})")
    return start, end


def read_memory(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    """``memory_read``, synchronously (the tool runs it off the event loop)."""
    slice_id, unit_id = args.get("slice_id"), args.get("unit_id")
    if (slice_id is None) == (unit_id is None):
        raise ToolError('give either "slice_id", or "unit_id" with "start" and "end"')
    if slice_id is not None and ("start" in args or "end" in args):
        raise ToolError('"start" and "end" go with "unit_id", not with "slice_id"')
    scope = scope_of(ctx)
    if slice_id is not None:
        item = _slice_in_scope(scope, str(slice_id))
        unit = item.unit
        start, end = item.start_index, item.end_index
        what = f"slice {item.pk} of unit {unit.pk}"
    else:
        unit = _unit_in_scope(scope, str(unit_id))
        start, end = _range(args)
        what = f"unit {unit.pk}"
    end = max(start, min(end, unit.message_count))
    stop = min(end, start + READ_MAX_MESSAGES)
    messages: list[dict[str, Any]] = []
    if start < stop:
        try:
            messages = memory.unit_messages(
                tenant=scope.tenant, unit_id=unit.pk, start=start, end=stop
            )
        except ForgeError as exc:
            raise ToolError(str(exc)) from None

    offset = args.get("offset", 0)
    header = f"Messages [{start}, {end}) of {what} ({unit.message_count} messages in the unit):"
    lines = [header]
    budget = READ_MAX_CHARS - len(header)
    shown_end = start
    resume: int | None = None  # the offset the next call goes on from, in a cut message
    for message in messages:
        skip = offset if message["index"] == start else 0
        text = message["text"][skip:]
        after = f" from character {skip}" if skip else ""
        head = f"[{message['index']}] {message['role']} ({message['at']}){after}: "
        if len(head) + len(text) + 1 > budget:
            if shown_end == start:
                # The first message alone is too long: show what fits, and go on in it.
                shown = max(budget - 1, 200) - len(head) - 1
                lines.append(head + text[:shown] + "…")
                total, until = len(message["text"]), skip + shown
                lines.append(
                    f"[message {message['index']} is cut: showed its characters "
                    f"[{skip}, {until}) of {total}]"
                )
                resume = until
            break
        budget -= len(head) + len(text) + 1
        lines.append(head + text)
        shown_end = message["index"] + 1
    if start >= end:
        lines.append("(no messages in this range)")
    cut = shown_end < end
    if cut:
        lines.append(
            f"[cut: showed messages [{start}, {shown_end}) of [{start}, {end}); continue with "
            f'memory_read {{"unit_id": "{unit.pk}", "start": {shown_end}, "end": {end}'
            + ("}]" if resume is None else f', "offset": {resume}}}]')
        )
    return ToolResult(
        output="\n".join(lines),
        title=f"memory read: {what}",
        metadata={
            "unit_id": unit.pk,
            "start": start,
            "end": shown_end,
            "requested_end": end,
            "truncated": cut,
            **({} if resume is None else {"offset": resume}),
        },
    )


@tool(
    name="memory_read",
    description=(
        "Read original messages from your long-term memory: the messages behind a slice "
        '(give "slice_id"), or messages [start, end) of a unit (give "unit_id", "start" '
        f'and "end"; end exclusive). At most {READ_MAX_MESSAGES} messages and '
        f"{READ_MAX_CHARS} characters per call; a longer answer says where to continue "
        '(a message longer than that, with "offset").'
    ),
    parameters={
        "type": "object",
        "properties": {
            "slice_id": {**ID, "description": "A slice id from memory_search."},
            "unit_id": {**ID, "description": "A unit id from memory_search."},
            "start": {
                "type": "integer",
                "minimum": 0,
                "maximum": INT_ARG_MAX,
                "description": "First message index.",
            },
            "end": {
                "type": "integer",
                "minimum": 0,
                "maximum": INT_ARG_MAX,
                "description": "Index after the last one.",
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "maximum": INT_ARG_MAX,
                "description": "Characters of the first message to skip (to go on in a "
                "message that was cut).",
            },
        },
        "additionalProperties": False,
    },
)
async def memory_read(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    return await off_the_loop(read_memory, ctx, args)
