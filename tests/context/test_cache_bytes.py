"""The context cache's byte cap: each state's estimate (``Derived.nbytes``) grows as
turns are folded, equals what a fresh seed of the same log counts (after fallbacks
too), and the cache evicts by it, least recently used first, and keeps no state
larger than the cap (``forge.context.incremental``)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from forge.context import request_for, visible_history
from forge.context.blocks import set_block
from forge.context.boundary import record_compaction
from forge.context.derived import Derived
from forge.context.incremental import cache, full_request, request_bytes
from forge.context.sizing import held
from sessions import selectors, services
from tests.runtime.test_context_incremental import DONE, turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache(settings: Any) -> None:
    cache.clear()
    settings.FORGE_CONTEXT_CACHE_SIZE = 256
    settings.FORGE_CONTEXT_CACHE_MESSAGES = 100_000
    settings.FORGE_CONTEXT_CACHE_BYTES = 64 * 1024 * 1024


def cached(session: Any) -> Derived:
    derived = cache.peek(session)
    assert derived is not None
    return derived


def assert_estimate_is_a_seeds(session: Any) -> int:
    """The cached state's estimate is its own parts' sum and what a seed counts."""
    derived = cached(session)
    assert derived.nbytes == derived._total()
    assert derived.nbytes == Derived.seed(session).nbytes
    return derived.nbytes


def test_the_estimate_grows_with_each_folded_turn_and_matches_a_seed(session):
    turn(session, 0)
    request_for(session)
    before = assert_estimate_is_a_seeds(session)
    turn(session, 1, tool=True)  # ~800 characters of tool output
    request_for(session)
    assert cache.stats["hit"] == 1
    after = assert_estimate_is_a_seeds(session)
    assert after - before > 800
    assert cache.nbytes == after


def test_the_estimate_stays_a_seeds_through_replacements_blocks_and_fallbacks(session):
    for n in range(3):
        turn(session, n, tool=True)
    request_for(session)
    # a part replaced (a tool output pruned), a block set: folded, no fallback
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    item = history[1]
    tool = next(p for p in item["parts"] if p["type"] == "tool")
    state = {**tool["state"], "time": {**tool["state"]["time"], "compacted": DONE}}
    services.update_part(
        session=session, part={"id": tool["id"], "message_id": item["info"]["id"], "state": state}
    )
    set_block(session, kind="memory", key="k", body={"text": "remember " * 50})
    request_for(session)
    assert not [k for k in cache.stats if k.startswith("fallback")]
    assert_estimate_is_a_seeds(session)
    # a compaction boundary and a removal fall back; the new seed is counted alike
    users = [i["info"]["id"] for i in history if i["info"]["role"] == "user"]
    record_compaction(
        session, summary="S", auto=True, overflow=False, tail_start_id=users[-1], model="x/y"
    )
    request_for(session)
    turn(session, 3)
    request_for(session)
    services.remove_message(session=session, message_id=users[0])
    visible_history(session)
    assert any(k.startswith("fallback") for k in cache.stats)
    assert_estimate_is_a_seeds(session)
    turn(session, 4)
    request_for(session)
    assert_estimate_is_a_seeds(session)
    assert cache.nbytes == cached(session).nbytes


def test_the_byte_cap_evicts_the_least_recently_used(session, user, settings):
    others = [services.create_session(user=user, title=f"o{n}") for n in range(2)]
    for s in (session, *others):
        turn(s, 0)
        request_for(s)
    sizes = {s.pk: cached(s).nbytes for s in (session, *others)}
    assert cache.nbytes == sum(sizes.values())
    # room for the two most recent states, not three
    settings.FORGE_CONTEXT_CACHE_BYTES = sizes[others[0].pk] + sizes[others[1].pk] + 1
    request_for(session)  # the oldest becomes the newest: others[0] is now least recent
    assert cache.peek(others[0]) is None
    assert cache.peek(session) is not None
    assert cache.peek(others[1]) is not None
    assert cache.stats["evicted"] == 1
    assert cache.nbytes == sizes[session.pk] + sizes[others[1].pk]
    assert cache.nbytes <= settings.FORGE_CONTEXT_CACHE_BYTES


def test_a_state_over_the_cap_is_served_not_kept(session, user, settings):
    other = services.create_session(user=user, title="other")
    turn(other, 0)
    request_for(other)
    for n in range(3):
        turn(session, n, tool=True)
    big = Derived.seed(session).nbytes
    settings.FORGE_CONTEXT_CACHE_BYTES = big - 1
    result = request_for(session)
    assert request_bytes(result) == request_bytes(full_request(session))
    assert cache.peek(session) is None
    assert cache.peek(other) is not None  # nothing evicted for it
    assert cache.stats["too large"] == 1
    assert cache.stats["evicted"] == 0
    request_for(session)  # so it is derived again, not folded
    assert cache.stats["hit"] == 0


def test_zero_bytes_is_no_byte_cap(session, settings):
    settings.FORGE_CONTEXT_CACHE_BYTES = 0
    turn(session, 0)
    request_for(session)
    assert cache.peek(session) is not None
    settings.FORGE_CONTEXT_CACHE_BYTES = -1
    turn(session, 1)
    request_for(session)
    assert cache.stats["hit"] == 1


def test_held_keeps_the_json_and_shares_keys_and_ids():
    raw = json.loads(
        '{"id": "prt_1", "message_id": "msg_1", "session_id": "ses_1", "type": "text",'
        ' "text": "' + "x" * 100 + '", "time": {"start": 1}, "synthetic": false, "n": null}'
    )
    message_id, session_id = "".join(["msg_", "1"]), "".join(["ses_", "1"])
    value, size = held(raw, {message_id: message_id, session_id: session_id})
    assert json.dumps(value) == json.dumps(raw)
    assert value["message_id"] is message_id
    assert value["session_id"] is session_id
    assert all(k is sys.intern(k) for k in value)
    assert value["type"] is sys.intern("text")
    # counted: two dicts, the id, type and text strings, the number; not the shared ids
    expected = sum(sys.getsizeof(v) for v in (value, value["time"], "prt_1", "text", "x" * 100, 1))
    assert size == expected
