"""Incremental context: the cached model input folds only the events since its head,
falls back to the full derivation whenever it cannot fold exactly, and equals the
full derivation byte for byte (``forge.context.incremental``)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from forge.context import request_for, visible_history
from forge.context.blocks import set_block
from forge.context.boundary import record_compaction
from forge.context.derived import Derived
from forge.context.incremental import (
    ContextCacheMismatch,
    cache,
    full_request,
    request_bytes,
)
from forge.context.pruning import prune
from forge.context.visible import visible_history as full_history
from sessions import selectors, services
from sessions.exceptions import ReplyOpen
from sessions.services.imports import parse_log

pytestmark = pytest.mark.django_db

DONE = "2026-11-30T00:00:01.000Z"


@pytest.fixture(autouse=True)
def _fresh_cache(settings: Any) -> None:
    cache.clear()
    settings.FORGE_CONTEXT_VERIFY = False  # these tests compare themselves (and count reads)


def turn(session: Any, n: int, *, parent: str | None = None, tool: bool = False) -> str:
    """The runtime's write pattern for one turn: user message + text part, assistant
    message, step-start, text (or tool) part, step-finish, message completion. Returns
    the user message's id (``parent``: answer that prompt again instead)."""
    if parent is None:
        parent = services.update_message(session=session, info={"role": "user"}).data["id"]
        services.update_part(
            session=session, part={"message_id": parent, "type": "text", "text": f"ask {n}"}
        )
    aid = services.update_message(
        session=session, info={"role": "assistant", "parent_id": parent}
    ).data["id"]
    services.update_part(session=session, part={"message_id": aid, "type": "step-start"})
    if tool:
        services.update_part(
            session=session,
            part={
                "message_id": aid,
                "type": "tool",
                "call_id": f"c{n}",
                "tool": "read_file",
                "state": {
                    "status": "completed",
                    "input": {"path": f"f{n}.txt", "a": 1},
                    "output": f"OUT{n} " + "x" * 800,
                    "title": "",
                    "metadata": {},
                    "time": {"start": DONE, "end": DONE},
                },
            },
        )
    else:
        services.update_part(
            session=session, part={"message_id": aid, "type": "text", "text": f"answer {n}"}
        )
    services.update_part(
        session=session,
        part={"message_id": aid, "type": "step-finish", "reason": "stop", "cost": 0,
              "tokens": {"input": 1, "output": 1}},
    )  # fmt: skip
    services.update_message(
        session=session, info={"id": aid, "finish": "stop", "completed_at": DONE}
    )
    return parent


def assert_equal_to_full(session: Any) -> tuple[str, Any]:
    result = request_for(session)
    assert request_bytes(result) == request_bytes(full_request(session))
    return result


def test_a_short_log_is_folded_from_its_start_in_one_query(session):
    for n in range(3):
        turn(session, n, tool=n == 1)
    with CaptureQueriesContext(connection) as queries:
        assert_equal_to_full(session)
    assert cache.stats["miss"] == 1
    assert cache.stats["seeded from start"] == 1
    assert len([q for q in queries if "sessionevent" in q["sql"]]) >= 1
    # The request itself was the snapshot lookup (none is stored: no turn ended through the
    # runtime) and one read of the log (the rest are the full derivation compared here).
    cache.clear()
    with CaptureQueriesContext(connection) as queries:
        request_for(session)
    verified = len(full_queries(session)) if settings.FORGE_CONTEXT_VERIFY else 0
    assert len(queries) == 2 + verified
    assert "contextsnapshot" in queries[0]["sql"]


def test_a_long_log_is_derived_in_full(session, monkeypatch):
    monkeypatch.setattr("forge.context.incremental.FOLD_FROM_START_EVENTS", 10)
    for n in range(3):
        turn(session, n)
    assert_equal_to_full(session)
    assert cache.stats["full:long"] == 1
    assert cache.stats["seeded from start"] == 0


def full_queries(session: Any) -> list[Any]:
    with CaptureQueriesContext(connection) as queries:
        full_request(session)
    return list(queries)


def test_a_hit_reads_only_the_events_after_its_head_in_one_query(session):
    for n in range(20):
        turn(session, n)
    assert_equal_to_full(session)
    assert cache.stats["miss"] == 1
    head = selectors.log_head(tenant=session.tenant, session=session)[0]
    turn(session, 20)
    new = selectors.log_head(tenant=session.tenant, session=session)[0] - head
    with CaptureQueriesContext(connection) as queries:
        _, request = request_for(session)
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "sessionevent" in queries[0]["sql"]
    assert ">=" in queries[0]["sql"]
    assert cache.stats["hit"] == 1
    assert cache.stats["folded"] == new == 7
    assert request.messages[-2:] == [
        {"role": "user", "content": "ask 20"},
        {"role": "assistant", "content": "answer 20"},
    ]
    assert request_bytes(request_for(session)) == request_bytes(full_request(session))
    assert cache.stats["folded"] == new  # nothing new: nothing folded


def test_the_visible_history_comes_from_the_same_cache(session):
    for n in range(5):
        turn(session, n, tool=n % 2 == 0)
    request_for(session)
    turn(session, 5)
    with CaptureQueriesContext(connection) as queries:
        history = visible_history(session)
    assert len(queries) == 1
    assert cache.stats["hit"] == 1
    assert history == full_history(session)
    assert len(history) == 12
    history[-1]["parts"].clear()  # a caller's copy: the cache keeps its own
    assert visible_history(session) == full_history(session)


def test_log_from_is_inclusive_and_reads_no_older_event(session):
    turn(session, 0)
    seq, head_hash = selectors.log_head(tenant=session.tenant, session=session)
    rows = selectors.log_from(tenant=session.tenant, session=session, seq=seq - 1)
    assert [row[0] for row in rows] == [seq - 1, seq]
    assert rows[-1][1] == head_hash


def test_a_missing_cache_derives_in_full_and_seeds(session):
    turn(session, 0)
    request_for(session)
    cache.clear()
    assert_equal_to_full(session)
    assert cache.stats["miss"] == 1
    assert cache.peek(session) is not None


def test_a_rolled_back_log_is_stale(session):
    turn(session, 0)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        turn(session, 1)
        request_for(session)  # cached at a head that the rollback removes
        raise Undo
    turn(session, 2)  # the same seqs again, with other events
    _, request = assert_equal_to_full(session)
    assert cache.stats["fallback:stale"] == 1
    assert "ask 1" not in str(request.messages)
    assert "ask 2" in str(request.messages)


def test_a_cache_of_another_session_is_never_folded_onto(session, user):
    other = services.create_session(user=user, title="other")
    for n in range(3):
        turn(other, n)
        turn(session, n)
    foreign = Derived.seed(other)
    foreign.tenant_id, foreign.session_id = session.tenant_id, session.pk
    cache._put(foreign)
    assert_equal_to_full(session)
    assert cache.stats["fallback:stale"] == 1


def test_a_log_deleted_and_imported_again_differently_is_stale(session, user):
    for n in range(3):
        turn(session, n)
    events = parse_log(list(selectors.export_lines(session=session)))
    request_for(session)
    services.delete_session(session=session)
    prefix = events[:-4]  # the same session id, a shorter log
    again = services.import_log(user=user, events=prefix)
    assert again.pk == session.pk
    turn(again, 9)  # past the cached head, with other events
    _, request = assert_equal_to_full(again)
    assert cache.stats["fallback:stale"] == 1
    assert "answer 9" in str(request.messages)
    assert "answer 2" not in str(request.messages)


def test_a_compaction_boundary_falls_back_then_folds_again(session):
    for n in range(6):
        turn(session, n)
    request_for(session)
    record_compaction(
        session, summary="SUMMARY", auto=False, overflow=False, tail_start_id=None, model="x/y"
    )
    _, request = assert_equal_to_full(session)
    assert cache.stats["fallback:compaction part"] == 1
    assert "ask 0" not in str(request.messages)
    assert "SUMMARY" in str(request.messages)
    turn(session, 6)  # after the boundary: folded again
    with CaptureQueriesContext(connection) as queries:
        request_for(session)
    assert len(queries) == 1
    assert cache.stats["hit"] == 1
    assert_equal_to_full(session)


def test_a_regenerated_reply_supersedes_the_old_one(session):
    turn(session, 0)
    parent = turn(session, 1)
    request_for(session)
    turn(session, 2, parent=parent)  # the same prompt answered again
    _, request = assert_equal_to_full(session)
    assert cache.stats["fallback:superseded"] == 1
    assert "answer 1" not in str(request.messages)
    assert request.messages[-1] == {"role": "assistant", "content": "answer 2"}


def test_removals_fall_back(session):
    turn(session, 0)
    turn(session, 1)
    request_for(session)
    last = selectors.last_message(tenant=session.tenant, session=session, role="assistant")
    assert last is not None
    services.remove_part(session=session, part_id=last["parts"][1]["id"])
    assert "answer 1" not in str(assert_equal_to_full(session)[1].messages)
    services.remove_message(session=session, message_id=last["info"]["id"])
    assert_equal_to_full(session)
    assert cache.stats["fallback:part.removed"] == cache.stats["fallback:message.removed"] == 1


def test_pruning_an_old_output_and_new_blocks_fold_without_fallback(session, settings):
    settings.FORGE_PRUNE_PROTECT_TOKENS = 10
    settings.FORGE_PRUNE_MINIMUM_TOKENS = 10
    for n in range(5):
        turn(session, n, tool=True)
    request_for(session)
    assert prune(session, visible_history(session))  # updates parts far from the end
    set_block(session, kind="system", key="agent", body={"text": "Be brief."})
    set_block(session, kind="settings", key="agent", body={"model": "offline/echo"})
    model, request = assert_equal_to_full(session)
    assert not [k for k in cache.stats if k.startswith("fallback")]
    assert model == "offline/echo"
    assert request.system == ["Be brief."]
    assert "pruned" in request.messages[2]["content"]


def test_verify_raises_when_the_cache_is_wrong(session, settings):
    turn(session, 0)
    request_for(session)
    derived = cache.peek(session)
    assert derived is not None
    derived.rendered[derived.kept[-1]] = [{"role": "assistant", "content": "forged"}]
    derived.dirty = True
    settings.FORGE_CONTEXT_VERIFY = True
    with pytest.raises(ContextCacheMismatch):
        request_for(session)


def test_the_caps_evict_and_zero_turns_the_cache_off(session, user, settings):
    other = services.create_session(user=user, title="other")
    turn(session, 0)
    turn(other, 0)
    settings.FORGE_CONTEXT_CACHE_SIZE = 1
    request_for(session)
    request_for(other)
    assert len(cache) == 1
    assert cache.peek(other) is not None
    assert cache.peek(session) is None
    settings.FORGE_CONTEXT_CACHE_SIZE = 10
    settings.FORGE_CONTEXT_CACHE_MESSAGES = 1  # each holds two messages
    cache.clear()
    request_for(session)
    assert len(cache) == 0
    settings.FORGE_CONTEXT_CACHE_SIZE = 0
    assert_equal_to_full(session)
    assert cache.stats["miss"] == 1
    assert len(cache) == 0


# --- property: random event sequences, incremental == full after every event --------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.booleans()),
        st.tuples(st.just("regenerate"), st.integers(0, 20)),
        st.tuples(st.just("prune"), st.integers(0, 20)),
        st.tuples(st.just("compact"), st.booleans()),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("block"), st.sampled_from(["a", "b", None])),
        st.tuples(st.just("rename"), st.just(True)),
        st.tuples(st.just("open"), st.booleans()),
        # memory's block: rolled through a message (an index), none (-1), or removed
        st.tuples(st.just("roll"), st.one_of(st.none(), st.integers(-1, 20))),
    ),
    min_size=1,
    max_size=14,
)


def _apply(session: Any, op: str, arg: Any, n: int) -> None:
    tenant = session.tenant
    users = [
        item["info"]["id"]
        for item in selectors.iter_history(tenant=tenant, session_id=session.pk)
        if item["info"]["role"] == "user"
    ]
    if op == "turn":
        turn(session, n, tool=arg)
    elif op == "regenerate" and users:
        turn(session, n, parent=users[arg % len(users)])
    elif op == "prune":
        history = list(selectors.iter_history(tenant=tenant, session_id=session.pk))
        tools = [(i, p) for i in history for p in i["parts"] if p["type"] == "tool"]
        if tools:
            item, part = tools[arg % len(tools)]
            state = {**part["state"], "time": {**part["state"]["time"], "compacted": DONE}}
            services.update_part(
                session=session, part={"id": part["id"], "message_id": item["info"]["id"],
                                       "state": state},
            )  # fmt: skip
    elif op == "compact" and users:
        record_compaction(
            session, summary=f"S{n}", auto=True, overflow=False,
            tail_start_id=users[-1] if arg else None, model="x/y",
        )  # fmt: skip
    elif op == "remove":
        history = list(selectors.iter_history(tenant=tenant, session_id=session.pk))
        if history:
            with contextlib.suppress(ReplyOpen):  # an open reply and its prompt stay
                services.remove_message(
                    session=session, message_id=history[arg % len(history)]["info"]["id"]
                )
    elif op == "block":
        body = {"removed": True} if arg is None else {"text": f"say {arg}{n}"}
        set_block(session, kind="memory", key="k", body=body)
    elif op == "roll":
        history = list(selectors.iter_history(tenant=tenant, session_id=session.pk))
        block: dict[str, Any] = {"removed": True} if arg is None else {"text": f"summaries {n}"}
        if arg is not None and arg >= 0 and history:
            block["rolled_through"] = history[arg % len(history)]["info"]["id"]
        set_block(session, kind="dialog_history", key="memory", body=block)
    elif op == "rename":
        services.update_session(session=session, title=f"t{n}")
    elif op == "open":  # an unfinished reply: a prompt and a step in flight
        uid = services.update_message(session=session, info={"role": "user"}).data["id"]
        services.update_part(
            session=session, part={"message_id": uid, "type": "text", "text": f"open {n}"}
        )
        if arg:
            aid = services.update_message(
                session=session, info={"role": "assistant", "parent_id": uid}
            ).data["id"]
            services.update_part(session=session, part={"message_id": aid, "type": "step-start"})


@hsettings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_incremental_equals_full_after_every_event(user, ops):
    session = services.create_session(user=user, title="p")
    cache.clear()
    for n, (op, arg) in enumerate(ops):
        _apply(session, op, arg, n)
        result = request_for(session)
        assert request_bytes(result) == request_bytes(full_request(session)), ops[: n + 1]
        # the messages' JSON length the compaction's estimate adds, memoized per message
        chars = len(json.dumps(result[1].messages, ensure_ascii=False))
        assert result[1].messages_chars in (None, chars), ops[: n + 1]
        rest = len(json.dumps({**result[1].as_dict(), "messages": []}, ensure_ascii=False))
        assert result[1].rest_chars in (None, rest), ops[: n + 1]
        assert visible_history(session) == full_history(session), ops[: n + 1]
        # the length memo holds only messages sent (an old rendering's entries left
        # with it), and the estimate is a seed's (but for a rolled cut moved forward:
        # the folded state keeps the items it hid, which a seed does not read)
        derived = cache.peek(session)
        if derived is not None:
            assert set(derived.chars) <= {id(m) for m in derived.messages}, ops[: n + 1]
            if not any(o == "roll" for o, _ in ops[: n + 1]):
                assert derived.nbytes == Derived.seed(session).nbytes, ops[: n + 1]
        # and replay (the log folded up to its head) gives the same bytes
        head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
        assert request_bytes(request_for(session, at=head)) == request_bytes(
            full_request(session)
        ), ops[: n + 1]


def test_a_removed_summary_shows_the_older_boundarys_kept_tail(user):
    """Found by the property test above: the newest boundary's summary is removed, so the
    older boundary is in force again, and its kept tail starts before the newest
    marker's read did. Every path (live, full, replay) must show that tail."""
    session = services.create_session(user=user, title="p")
    ops = [("turn", True), ("compact", True), ("compact", True)]
    for n, (op, arg) in enumerate(ops):
        _apply(session, op, arg, n)
    newest_summary = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))[-1]
    assert newest_summary["info"]["summary"] is True
    services.remove_message(session=session, message_id=newest_summary["info"]["id"])
    head = selectors.head_seq(tenant=session.tenant, session_id=session.pk)
    replayed = request_bytes(request_for(session, at=head))
    assert "ask 0" in replayed  # the older boundary's kept tail
    assert request_bytes(full_request(session)) == replayed
    assert request_bytes(request_for(session)) == replayed


def test_the_estimate_encodes_only_new_messages_and_matches_the_full_encoding(session):
    """``over_limit``'s estimate: the cached request knows its messages' JSON length, the
    same as encoding them (non-ASCII, a tool call and its output included), and a hit
    encodes only the turn's new messages."""
    from forge.runtime.compaction import estimate_tokens

    for n in range(4):
        turn(session, n, tool=n == 2)
    services.update_message(session=session, info={"role": "user"})  # an empty prompt
    _, request = request_for(session)
    full = len(json.dumps(request.as_dict(), ensure_ascii=False)) // 4
    assert request.messages_chars == len(json.dumps(request.messages, ensure_ascii=False))
    assert estimate_tokens(request) == full
    set_block(session, kind="system", key="agent", body={"text": "Be brief. 简短"})
    _, request = request_for(session)  # a new block: the rest is measured again
    assert estimate_tokens(request) == len(json.dumps(request.as_dict(), ensure_ascii=False)) // 4
    assert request.system == ["Be brief. 简短"]
    key = (session.tenant_id, session.pk)
    known = dict(cache._entries[key].chars)
    turn(session, 9)
    _, again = request_for(session)
    memo = cache._entries[key].chars
    assert again.messages_chars == len(json.dumps(again.messages, ensure_ascii=False))
    new = [m for m in again.messages if id(m) not in known]
    assert [m["content"] for m in new] == ["ask 9", "answer 9"]  # the rest were memoized
    assert all(id(m) in memo for m in again.messages)


def test_pruning_reads_no_history_until_the_outputs_could_reach_its_minimum(
    session, settings, monkeypatch
):
    """``prune_choice``: the cache keeps what the unpruned tool outputs cost; under
    ``FORGE_PRUNE_MINIMUM_TOKENS`` together, nothing is chosen and the history is not
    walked. Over it, the choice is the full derivation's, and the outputs pruned leave
    the sum (so the next turns are cheap again)."""
    from forge.context import prune_choice
    from forge.context.pruning import choose, mark

    settings.FORGE_PRUNE_PROTECT_TOKENS = 10
    settings.FORGE_PRUNE_MINIMUM_TOKENS = 650  # an output is ~200 tokens
    for n in range(3):
        turn(session, n, tool=True)
    walked: list[int] = []

    def history(self: Derived) -> list[Any]:
        walked.append(1)
        return []

    monkeypatch.setattr(Derived, "history", history)
    assert prune_choice(session) == []
    assert walked == []  # 3 outputs, ~600 tokens: below the minimum without a walk
    monkeypatch.undo()
    for n in range(3, 6):
        turn(session, n, tool=True)
    chosen = prune_choice(session)
    assert [p["id"] for p in chosen] == [p["id"] for p in choose(full_history(session))]
    assert len(chosen) == 4  # the outputs of the last two prompts are protected
    mark(session, chosen)
    derived = cache.peek(session)
    assert derived is not None
    request_for(session)  # folds the marks
    assert sum(derived.tool_tokens.values()) < settings.FORGE_PRUNE_MINIMUM_TOKENS
    assert prune_choice(session) == [] == choose(full_history(session))


def _cached(session: Any) -> Derived:
    derived = cache.peek(session)
    assert derived is not None
    return derived


def _reply_in_steps(session: Any, n: int) -> None:
    """A prompt answered in three steps, the request read before each (as the run loop
    does between steps): each read renders the reply so far, which the next replaces."""
    parent = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": parent, "type": "text", "text": f"steps {n}"}
    )
    aid = services.update_message(
        session=session, info={"role": "assistant", "parent_id": parent}
    ).data["id"]
    for step in range(3):
        request_for(session)
        services.update_part(session=session, part={"message_id": aid, "type": "step-start"})
        services.update_part(
            session=session,
            part={"message_id": aid, "type": "text", "text": f"step {step} of {n} " * 20},
        )
    services.update_message(
        session=session, info={"id": aid, "finish": "stop", "completed_at": DONE}
    )


def test_the_estimate_bounds_the_memory_each_state_holds(session, user, settings):
    """Each cached state's estimate (``Derived.cost``: ``nbytes`` and the snapshot memo)
    is at least the memory freed when it leaves the cache, measured with ``tracemalloc``,
    and not far above it: for tiny turns (the fixed costs per message dominate), turns
    with tool outputs whose snapshots are stored (the chunk memo), replies read between
    their steps (renderings replaced after the request's length memo saw them), each
    read again after every turn (a hit: its requests carry their JSON lengths); and
    states decoded from a snapshot, lazy and unpacked (decoded, every key and id is a
    copy of its own unless rebuilt)."""
    import gc
    import tracemalloc

    from forge.context import store_snapshot

    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 1
    tools, steps, lazy, cold = (
        services.create_session(user=user, title=t) for t in ("tools", "steps", "lazy", "cold")
    )
    tiny = session
    tracemalloc.start()
    try:
        for n in range(40):
            turn(tiny, n)
            request_for(tiny)
        for n in range(12):
            turn(tools, n, tool=True)
            request_for(tools)
            with transaction.atomic():
                store_snapshot(tools)
        for n in range(12):
            _reply_in_steps(steps, n)
            request_for(steps)
        for each in (lazy, cold):
            for n in range(12):
                turn(each, n, tool=n % 3 == 0)
            with transaction.atomic():
                store_snapshot(each)
            cache._take((each.tenant_id, each.pk))
            turn(each, 12)
            request_for(each)  # decoded from the snapshot (lazy), then the turn folded
            request_for(each)  # served again
        assert _cached(lazy).lazy
        visible_history(cold)  # its items decoded
        assert not _cached(cold).lazy
        shapes = (tiny, tools, steps, lazy, cold)
        costs = {}
        for each in shapes:
            derived = _cached(each)
            assert derived.sized
            # the length memo holds only the messages sent, no old rendering
            assert set(derived.chars) <= {id(m) for m in derived.messages}
            costs[each.pk] = derived.cost
            del derived
        assert _cached(tools).chunks
        assert cache.nbytes == sum(costs.values())
        freed = {}
        for each in shapes:
            gc.collect()
            held = tracemalloc.get_traced_memory()[0]
            cache._take((each.tenant_id, each.pk))  # dropped: freed with what only it holds
            gc.collect()
            freed[each.pk] = held - tracemalloc.get_traced_memory()[0]
        ratios = {each.title: freed[each.pk] / costs[each.pk] for each in shapes}
        assert all(ratio <= 1 for ratio in ratios.values()), ratios
        # Not far above either; but a lazy state is estimated as if unpacked (its items,
        # still in chunks, are counted): ~0.35 of it.
        assert all(ratios[each.title] >= 0.6 for each in shapes if each != lazy), ratios
    finally:
        tracemalloc.stop()


def test_a_state_decoded_from_a_snapshot_interns_no_message_id(session, settings):
    """msgpack interns every map key it decodes: a snapshot keyed by message ids would
    put each id of every session a process loads into the interpreter's table of
    interned strings (which never shrinks). The snapshot has no such map: neither the
    lazy state nor the unpacked one holds an interned id."""
    import sys

    from forge.context import store_snapshot

    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 1
    for n in range(3):
        turn(session, n, tool=n == 1)
    with transaction.atomic():
        store_snapshot(session)
    cache.clear()
    request_for(session)
    derived = _cached(session)
    assert derived.lazy
    assert derived.replies
    assert derived.tool_tokens

    def interned(value: str) -> bool:
        return sys.intern("".join(list(value))) is value

    lazy_ids = [*derived.replies, *derived.replies.values(), *derived.tool_tokens]
    assert not any(interned(i) for i in lazy_ids)
    derived.unpack()
    assert len(derived.items) == 6
    assert not any(interned(i) for i in [*derived.items, *derived.replies, *derived.order])
