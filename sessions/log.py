"""The log's canonical form: event bodies, their JSON, the hash chain, times.

Each event stores ``hash = sha256(prev_hash + canonical_json(body))`` where
``body`` is the wire event ``{seq, id, session_id, type, at, data}`` and the
first event's ``prev_hash`` is :data:`GENESIS_HASH`. Changing, dropping or
reordering any event breaks every hash after it, so an exported log is
tamper-evident.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from accounts.times import format_time, now_ms, parse_time

__all__ = [
    "EVENT_TYPES",
    "GENESIS_HASH",
    "LOG_FORMAT",
    "LOG_VERSION",
    "ChainProblem",
    "canonical_body_text",
    "canonical_json",
    "canonical_json_without",
    "chain_hash",
    "chain_hash_text",
    "event_body",
    "format_time",
    "log_header",
    "now_ms",
    "parse_time",
    "verify_chain",
]

GENESIS_HASH = "0" * 64

EVENT_TYPES = frozenset(
    {
        "session.created",
        "session.updated",
        "message.updated",
        "message.removed",
        "part.updated",
        "part.removed",
        "session.compacted",
        "context.updated",
    }
)


def canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def in_canonical_order(value: Any) -> Any:
    """``value`` with every object's keys in canonical (sorted) order, as
    :func:`canonical_json` writes them. SQLite reads stored data back in that order and
    PostgreSQL's ``jsonb`` in an order of its own (shorter keys first); what is
    serialized again from it for a reader (a tool's schema and arguments for the model,
    an export) goes through this, or ``sort_keys``, so it does not depend on the engine."""
    if isinstance(value, dict):
        return {key: in_canonical_order(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [in_canonical_order(item) for item in value]
    return value


def canonical_json_without(value: Mapping[str, Any], keys: Iterable[str]) -> tuple[str, str]:
    """``(canonical_json(value), canonical_json(value without keys))`` at the cost of one
    serialisation: the canonical text of a dict is its items in sorted order, so the
    runs of items between the left-out keys are serialised once and joined both ways.
    Each left-out key's value is serialised alone (they are short: an id, a time)."""
    out = sorted(key for key in set(keys) if key in value)
    if not out:
        text = canonical_json(value)
        return text, text
    bounds: list[str | None] = [None, *out, None]
    runs = [
        canonical_json(
            {k: v for k, v in value.items() if (lo is None or k > lo) and (hi is None or k < hi)}
        )[1:-1]
        for lo, hi in pairwise(bounds)
    ]
    items = [f"{canonical_json(key)}:{canonical_json(value[key])}" for key in out]
    full = [runs[0]]
    for item, run in zip(items, runs[1:], strict=True):
        full += [item, run]
    return (
        "{" + ",".join(p for p in full if p) + "}",
        "{" + ",".join(p for p in runs if p) + "}",
    )


def chain_hash(prev_hash: str, body: Mapping[str, Any]) -> str:
    return chain_hash_text(prev_hash, canonical_json(body))


def chain_hash_text(prev_hash: str, canonical_body: str) -> str:
    return hashlib.sha256((prev_hash + canonical_body).encode()).hexdigest()


def canonical_body_text(
    *, seq: int, id: str, session_id: str, type: str, at: str, data_json: str
) -> str:
    """``canonical_json(event_body(...))`` from the already canonical ``data_json``.

    Saves serialising the data twice on the append path; keys are in sorted order.
    """
    return (
        f'{{"at":{_dumps(at)},"data":{data_json},"id":{_dumps(id)},"seq":{int(seq)},'
        f'"session_id":{_dumps(session_id)},"type":{_dumps(type)}}}'
    )


def _dumps(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def event_body(
    *, seq: int, id: str, session_id: str, type: str, at: str, data: Any
) -> dict[str, Any]:
    return {"seq": seq, "id": id, "session_id": session_id, "type": type, "at": at, "data": data}


@dataclass(frozen=True)
class ChainProblem:
    seq: int
    message: str


def verify_chain(
    events: Iterable[Mapping[str, Any]], *, session_id: str | None = None
) -> list[ChainProblem]:
    """Check seqs 1..n without gaps and every hash. ``events`` are wire events with ``hash``."""
    problems: list[ChainProblem] = []
    prev_hash = GENESIS_HASH
    expected_seq = 1
    for event in events:
        seq = event.get("seq")
        if seq != expected_seq:
            problems.append(ChainProblem(expected_seq, f"expected seq {expected_seq}, found {seq}"))
            return problems
        if session_id is not None and event.get("session_id") != session_id:
            problems.append(ChainProblem(seq, "event belongs to another session"))
        kind = event.get("type")
        if not isinstance(kind, str) or kind not in EVENT_TYPES:  # (a dict: unhashable)
            problems.append(ChainProblem(seq, f"unknown event type {repr(kind)[:200]}"))
        body = event_body(
            seq=seq,
            id=event.get("id", ""),
            session_id=event.get("session_id", ""),
            type=event.get("type", ""),
            at=event.get("at", ""),
            data=event.get("data"),
        )
        expected_hash = chain_hash(prev_hash, body)
        if event.get("hash") != expected_hash:
            problems.append(ChainProblem(seq, "hash does not match the event and its predecessor"))
            return problems
        prev_hash = expected_hash
        expected_seq += 1
    return problems


LOG_FORMAT = "forge.session-log"  # the header line of an export file
LOG_VERSION = 1


def log_header(*, session_id: str, events: int, head_hash: str) -> dict[str, Any]:
    """The first line of an export file: what follows, and the hash it ends with."""
    return {
        "format": LOG_FORMAT,
        "version": LOG_VERSION,
        "session_id": session_id,
        "events": events,
        "head_hash": head_hash,
    }
