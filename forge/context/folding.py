"""The fold of :class:`~forge.context.derived.Derived`: one event applied onto the
derived context in place (:meth:`Folding.fold`), or :class:`Fallback` when it cannot be
exactly (the invariants are in :mod:`forge.context.derived`'s docstring).

A mixin, as :class:`~forge.runtime.tool_calls.ToolCalls` is of the processor: the
state's fields are :class:`Derived`'s; what the fold reads and writes of them is
declared below for the type checker only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sessions.projector import apply_context

from .messages import item_messages
from .pruning import candidate_tokens
from .rolled import is_generated, passed_boundaries, rolled_kept, rolled_through
from .sizing import MESSAGE_OVERHEAD, held, held_info, held_part, rendering_bytes
from .superseded import is_reply


class Fallback(Exception):
    """An event the fold does not apply incrementally; the message says which."""


def ordered(low: str | None, high: str) -> bool:
    """``low < high`` in the database's order too (both generated ids), or no ``low``."""
    if not is_generated(high):
        return False
    return low is None or (is_generated(low) and low < high)


class Folding:
    """The fold's methods of :class:`~forge.context.derived.Derived`."""

    if TYPE_CHECKING:
        session_id: str
        seq: int
        hash: str
        start: str | None
        through: str | None
        items: dict[str, dict[str, Any]]
        last_id: str | None
        order: list[str]
        kept: list[str]
        replies: dict[str, str]
        rendered: dict[str, list[dict[str, Any]]]
        blocks: dict[str, dict[str, Any]]
        messages: list[dict[str, Any]]
        tail_start: int
        dirty: bool
        sizes: dict[str, list[int]]
        blocks_bytes: int
        tool_tokens: dict[str, int]
        nbytes: int
        chunks: list[bytes]
        appended: set[str]
        lazy: bool
        chars: dict[int, tuple[dict[str, Any], int]]
        prefix: list[int]

        def unpack(self) -> None: ...

        def forget_chunks(self) -> None: ...

        def _resize(self, message_id: str, index: int, size: int) -> None: ...

    def _item(self, message_id: str) -> dict[str, Any] | None:
        """The read item ``message_id``, or None; decodes the chunks only for an id that
        may be in them (not one newer than every item)."""
        item = self.items.get(message_id)
        if item is None and self.lazy and not ordered(self.last_id, message_id):
            self.unpack()
            item = self.items.get(message_id)
        return item

    def _changed(self, message_id: str) -> None:
        """An item changed in place: a chunk holding its old value is no memo any more."""
        if self.chunks and message_id not in self.appended:
            self.unpack()
            self.forget_chunks()

    def fold(self, seq: int, event_hash: str, type: str, data: Any) -> None:
        """Apply event ``seq`` (raises :class:`Fallback` when it cannot)."""
        if type == "message.updated":
            self._message(data)
        elif type == "part.updated":
            self._part(data)
        elif type == "context.updated":
            kept_before = rolled_kept(self.blocks)
            apply_context(self.blocks, data)
            self.blocks, size = held(self.blocks)  # the blocks, not the state: a few per turn
            self.nbytes += size - self.blocks_bytes
            self.blocks_bytes = size
            self._cut(rolled_through(self.blocks), kept_before, rolled_kept(self.blocks))
        elif type not in ("session.created", "session.updated"):  # those change no input
            raise Fallback(type)  # session.compacted, removals, anything new
        self.seq, self.hash = seq, event_hash

    def _message(self, data: dict[str, Any]) -> None:
        if data.get("summary"):
            raise Fallback("summary")  # a boundary begins, changes or closes
        info, info_size = held_info(data, self.session_id)
        message_id = str(info["id"])
        item = self._item(message_id)
        if item is not None:
            old = item["info"]
            for key in ("role", "parent_id", "summary"):
                if old.get(key) != info.get(key):
                    raise Fallback(f"message {key}")
            self._changed(message_id)
            item["info"] = info
            self._resize(message_id, 0, info_size)
            self._render(message_id)
        elif self.start is not None and ordered(message_id, self.start):
            return  # older than the read range: the model does not see it
        elif not ordered(self.last_id, message_id) or not ordered(self.through, message_id):
            raise Fallback("message order")
        else:
            if is_reply(info):
                parent = str(info["parent_id"])
                if parent in self.replies:
                    raise Fallback("superseded")
                self.replies[parent] = message_id
            self.items[message_id] = {"info": info, "parts": []}
            self.appended.add(message_id)
            self.last_id = message_id
            self.order.append(message_id)
            self.kept.append(message_id)
            rendering = item_messages(self.items[message_id])
            self.rendered[message_id] = rendering
            self.sizes[message_id] = [info_size, rendering_bytes(rendering, self.items[message_id])]
            self.nbytes += info_size + self.sizes[message_id][1] + MESSAGE_OVERHEAD
            if not self.dirty:
                self.tail_start = len(self.messages)
                self.messages.extend(rendering)

    def _cut(self, through: str | None, kept_before: frozenset[str], kept: frozenset[str]) -> None:
        """Apply the rolled cut in force after a ``context.updated``: forward, the
        messages it now hides leave the view; back or removed, or keeping messages in
        view below it (other agents' or speakers', rare), fall back."""
        if through == self.through and kept == kept_before:
            return
        if kept or kept_before:
            raise Fallback("rolled cut keeps messages in view")
        if through is None or not ordered(self.through, through):
            raise Fallback("rolled cut moved back")
        if passed_boundaries((self.items[i] for i in self.order if i in self.items), through):
            raise Fallback("rolled cut passed a boundary")  # its summary leaves the view
        hidden = {i for i in self.order if i <= through}
        self.through = through
        if not hidden:
            return
        self.unpack()  # the renderings it drops, and their sizes
        self.forget_chunks()  # the sizes and the kept messages change
        self.order = [i for i in self.order if i not in hidden]
        self.kept = [i for i in self.kept if i not in hidden]
        for message_id in hidden:
            old = self.rendered.pop(message_id, None)
            if old is not None:
                self._resize(message_id, 1, 0)
                self._unsized(old)
            self.tool_tokens.pop(message_id, None)
        self.replies = {p: r for p, r in self.replies.items() if r not in hidden}
        self.dirty = True

    def _part(self, data: dict[str, Any]) -> None:
        if data.get("type") == "compaction":
            raise Fallback("compaction part")
        message_id = str(data["message_id"])
        item = self._item(message_id)
        if item is None:
            if self.start is not None and ordered(message_id, self.start):
                return  # a message older than the read range
            raise Fallback("part of an unknown message")
        part, part_size = held_part(data, self.session_id, item["info"]["id"])
        part_id = str(part["id"])
        self._changed(message_id)
        parts = item["parts"]
        for index in range(len(parts) - 1, -1, -1):
            if parts[index]["id"] == part_id:
                parts[index] = part
                self._resize(message_id, 2 + index, part_size)
                break
        else:
            if parts and not ordered(str(parts[-1]["id"]), part_id):
                raise Fallback("part order")
            parts.append(part)
            self.sizes[message_id].append(part_size)
            self.nbytes += part_size
        self._tools(message_id, parts)
        self._render(message_id)

    def _tools(self, message_id: str, parts: list[dict[str, Any]]) -> None:
        tokens = candidate_tokens(parts)
        if tokens:
            self.tool_tokens[message_id] = tokens
        else:
            self.tool_tokens.pop(message_id, None)

    def _render(self, message_id: str) -> None:
        old = self.rendered.get(message_id)
        if old is None:
            return  # read but not sent (behind a boundary, or superseded)
        rendering = item_messages(self.items[message_id])
        self.rendered[message_id] = rendering
        self._resize(message_id, 1, rendering_bytes(rendering, self.items[message_id]))
        self._unsized(old)
        if not self.dirty and self.kept[-1] == message_id:
            del self.messages[self.tail_start :]
            del self.prefix[self.tail_start :]
            self.messages.extend(rendering)
        else:
            # Joined again from every kept message's rendering: a state decoded from a
            # snapshot has the old ones only inside ``messages`` until it unpacks, which
            # must happen while ``messages`` still holds them.
            self.unpack()
            self.dirty = True

    def _unsized(self, rendering: list[dict[str, Any]]) -> None:
        """A rendering left ``rendered`` (replaced, or hidden by the cut): its messages'
        length memo entries go with it, so that ``chars`` holds only dicts of
        ``messages`` (what :data:`MEMO_PER_MODEL_MESSAGE` counts), never an old one."""
        memo = self.chars
        if memo:
            for message in rendering:
                memo.pop(id(message), None)
