"""Context snapshots (``forge.context.snapshot``, ``sessions.snapshots``): a cold process
loads the stored derived state and folds only the events after it, and gets exactly
what the full derivation gives; a snapshot that does not match the log, or is not
intact, is ignored.

``FORGE_CONTEXT_VERIFY`` stays on (the test settings): every ``request_for`` and
``visible_history`` below is also compared with the full derivation by the cache."""

from __future__ import annotations

import zlib
from itertools import pairwise
from typing import Any

import msgpack
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from forge.context import request_for, store_snapshot, visible_history
from forge.context import snapshot as codec
from forge.context.derived import Derived
from forge.context.incremental import cache, full_request, request_bytes
from forge.context.pruning import candidate_tokens
from forge.context.visible import visible_history as full_history
from sessions import selectors, services, snapshots
from sessions.models import ContextSnapshot
from tests.runtime.test_context_incremental import OPS, _apply, turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _snapshots(settings: Any) -> None:
    cache.clear()
    settings.FORGE_CONTEXT_VERIFY = True
    settings.FORGE_CONTEXT_SNAPSHOTS = True
    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 1  # every store call stores
    settings.FORGE_CONTEXT_CACHE_SIZE = 256


def store(session: Any) -> bool:
    with transaction.atomic():  # as the turn's last write calls it
        return store_snapshot(session)


def stored(session: Any) -> snapshots.Stored:
    row = snapshots.read(tenant_id=session.tenant_id, session_id=session.pk)
    assert row is not None
    return row


def assert_cold_load_is_full(session: Any, *, from_snapshot: bool = True) -> None:
    """A process without the session (cache cleared), with the cache on and off, loads
    the request and the visible history the full derivation gives."""
    want = request_bytes(full_request(session))
    want_history = full_history(session)
    for size in (256, 0):
        cache.clear()
        with pytest.MonkeyPatch.context() as patch:
            from django.conf import settings

            patch.setattr(settings, "FORGE_CONTEXT_CACHE_SIZE", size)
            assert request_bytes(request_for(session)) == want
            assert (cache.stats["snapshot"] == 1) is from_snapshot, cache.stats
            assert visible_history(session) == want_history


def test_a_stored_snapshot_is_keyed_by_the_logs_head(session):
    for n in range(3):
        turn(session, n, tool=n == 1)
    assert store(session)
    row = stored(session)
    assert (row.seq, row.hash) == selectors.log_head(tenant=session.tenant, session=session)
    assert row.version == codec.VERSION
    assert_cold_load_is_full(session)


def test_a_cold_load_folds_only_the_events_after_the_snapshot(session):
    for n in range(3):
        turn(session, n)
    store(session)
    turn(session, 3, tool=True)  # 7 events after it
    cache.clear()
    assert_cold_load_is_full(session)
    cache.clear()
    request_for(session)
    assert cache.stats["snapshot"] == 1
    assert cache.stats["folded"] == 7
    derived = cache.peek(session)
    assert derived is not None
    assert derived.lazy


def test_a_state_decoded_from_a_snapshot_folds_changes_to_old_items(session, settings):
    """Pruning an old tool output and re-answering an old prompt touch items that are
    still in the snapshot's chunks: the fold decodes them first."""
    first = turn(session, 0, tool=True)
    turn(session, 1)
    store(session)
    cache.clear()
    request_for(session)  # lazy state in the cache
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    tool = next(p for i in history for p in i["parts"] if p["type"] == "tool")
    state = {
        **tool["state"],
        "time": {**tool["state"]["time"], "compacted": "2026-11-30T00:00:02.000Z"},
    }
    pruned = {"id": tool["id"], "message_id": tool["message_id"], "state": state}
    services.update_part(session=session, part=pruned)
    assert "was pruned" in request_bytes(request_for(session))
    turn(session, 2, parent=first)  # supersedes the first reply: falls back, correctly
    assert_equal(session)
    store(session)
    assert_cold_load_is_full(session)


def assert_equal(session: Any) -> None:
    assert request_bytes(request_for(session)) == request_bytes(full_request(session))
    assert visible_history(session) == full_history(session)


def test_a_lazy_state_stores_again_and_merges_its_chunks(session):
    """A state decoded from a snapshot stores the next one without decoding its items
    (one more chunk of each kind), and its chunks merge as they accumulate: the older
    ones larger, never more than ``MAX_CHUNKS``."""
    turn(session, 0)
    store(session)
    for n in range(1, 24):
        cache.clear()
        turn(session, n, tool=n % 2 == 0)
        request_for(session)  # decoded from the previous snapshot, lazy
        store(session)
        derived = cache.peek(session)
        assert derived is not None
        assert derived.lazy  # storing did not decode the items
        for chunks in (derived.chunks, derived.hchunks, derived.rchunks):
            assert 1 <= len(chunks) <= codec.MAX_CHUNKS, [len(c) for c in chunks]
            assert all(len(a) > len(b) for a, b in pairwise(chunks))
        assert derived.chunked == len(derived)
        assert derived.hchunked == (len(derived.order), len(derived.kept), len(derived.replies))
        assert derived.rchunked == len(derived.kept)
        assert_cold_load_is_full(session)


def test_a_warm_state_packs_only_what_came_since_its_last_snapshot(session):
    """Stored after every turn by the process that serves the session, each snapshot
    packs the items, ids and renderings that came since the last one (the chunks'
    merges left out here: :func:`test_tiered_chunks_stay_few_ordered_and_whole`), so
    that over the turns about the state's size is packed, once; packing the whole state
    each time would be the sum of its sizes, ~n/2 times. And the cold load of the last
    equals the full derivation."""
    packed: list[int] = []
    real = codec._pack

    def counting(value: Any) -> bytes:
        packed.append(len(msgpack.packb(value, use_bin_type=True)))
        return real(value)

    turns = 40
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "_pack", counting)
        patch.setattr(codec, "tiered", lambda chunks, merge: chunks)
        for n in range(turns):
            turn(session, n, tool=n % 3 == 0)
            request_for(session)
            store(session)
    derived = cache.peek(session)
    assert derived is not None
    assert not derived.lazy
    assert len(derived.chunks) == turns
    whole = len(msgpack.packb([list(derived.items.values()), derived.messages, derived.order]))
    assert sum(packed) < 2 * whole, (sum(packed), whole)
    assert_cold_load_is_full(session)


@pytest.mark.parametrize("sizes", [[1] * 40, list(range(1, 40)), list(range(40, 0, -1))])
def test_tiered_chunks_stay_few_ordered_and_whole(sizes):
    """:func:`codec.tiered` after each new chunk: a few chunks (compressed, two merged
    chunks are less than twice one, so the count grows as a log of base less than 2),
    strictly smaller from the oldest to the newest, holding every item in order."""
    chunks: list[bytes] = []
    items: list[str] = []
    for n, size in enumerate(sizes):
        new = [f"{n}-{i}-" + "x" * 40 for i in range(size)]
        items += new
        chunks = codec.tiered([*chunks, codec._pack(new)], codec.merge_items)
        assert len(chunks) <= min(codec.MAX_CHUNKS, 2 * len(items).bit_length())
        assert all(len(a) > len(b) for a, b in pairwise(chunks))
        assert [x for chunk in chunks for x in codec._unpack(chunk)] == items


@pytest.mark.parametrize(
    "sizes", [(0, 3), (3, 12), (15, 1), (40, 70_000), (65_535, 1), (70_000, 0)]
)
def test_merged_chunks_decode_as_their_parts_joined(sizes):
    """The merges join encoded elements under a new array header (fix, 16- and 32-bit
    lengths): the merged chunk decodes to the two chunks' values joined."""
    a, b = (
        [{"id": f"m{k}-{i}", "n": i, "t": "é" * (i % 3)} for i in range(n)]
        for k, n in enumerate(sizes)
    )
    merged = codec.merge_items(codec._pack(a), codec._pack(b))
    assert codec._unpack(merged) == a + b
    rendered = [[[1] * len(a), a], [[2] * len(b), b]]
    merged = codec.merge_rendered(codec._pack(rendered[0]), codec._pack(rendered[1]))
    assert codec._unpack(merged) == [[1] * len(a) + [2] * len(b), a + b]
    lists = [[["o1"], ["k1"], [["p", "r"]]], [["o2"], [], []]]
    merged = codec.merge_lists(codec._pack(lists[0]), codec._pack(lists[1]))
    assert codec._unpack(merged) == [["o1", "o2"], ["k1"], [["p", "r"]]]


def test_a_chunk_that_does_not_merge_is_unreadable():
    good = codec._pack([])  # smaller than each bad one: they merge
    for bad in (b"not zlib at all", zlib.compress(b"\xc1" * 20), codec._pack({"a": "x" * 20})):
        with pytest.raises(codec.ChunkUnreadable):
            codec.tiered([good, bad], codec.merge_items)
    with pytest.raises(codec.ChunkUnreadable):
        codec.tiered(
            [codec._pack([[1], [2], [3]]), codec._pack([[1], [2], [3]])], codec.merge_rendered
        )


def test_the_estimate_survives_a_snapshot(session):
    for n in range(4):
        turn(session, n, tool=n % 2 == 1)
    store(session)
    cache.clear()
    request_for(session)
    derived = cache.peek(session)
    assert derived is not None
    assert derived.lazy
    assert derived.nbytes == Derived.seed(session).nbytes
    assert len(derived) == len(Derived.seed(session))
    derived.unpack()
    assert derived.nbytes == derived._total()


# --- a snapshot that does not match the log, or is not intact, is ignored -------------


def _replace(session: Any, **changes: Any) -> None:
    row = stored(session)
    values = {
        "seq": row.seq,
        "hash": row.hash,
        "version": row.version,
        "state": row.state,
        **changes,
    }
    snapshots.drop(session_id=session.pk)
    snapshots.write(tenant_id=session.tenant_id, session_id=session.pk, **values)


def _head(row: snapshots.Stored) -> bytes:
    head: bytes = msgpack.unpackb(row.state[8:])[3]
    return head


def _with_crc(blob: bytes) -> bytes:
    return blob[:4] + zlib.crc32(blob[8:]).to_bytes(4, "big") + blob[8:]


def _flip(blob: bytes, at: int) -> bytes:
    return blob[:at] + bytes([blob[at] ^ 0x55]) + blob[at + 1 :]


@pytest.mark.parametrize(
    "tamper",
    [
        "wrong head hash",
        "seq beyond the log",
        "an older seq",
        "bad version",
        "corrupt bytes",
        "corrupt head, checksum fixed",
        "not a snapshot",
        "another session's",
    ],
)
def test_a_snapshot_that_does_not_match_the_log_is_ignored(session, user, tamper):
    for n in range(3):
        turn(session, n, tool=n == 2)
    store(session)
    row = stored(session)
    if tamper == "wrong head hash":
        _replace(session, hash="0" * 64)
    elif tamper == "seq beyond the log":
        _replace(session, seq=row.seq + 5)
    elif tamper == "an older seq":  # the key of an earlier event, bytes of the head's
        earlier = selectors.log_from(tenant=session.tenant, session=session, seq=row.seq - 3)[0]
        _replace(session, seq=earlier[0], hash=earlier[1])
    elif tamper == "bad version":
        _replace(session, version=codec.VERSION + 1)
    elif tamper == "corrupt bytes":
        _replace(session, state=_flip(row.state, len(row.state) // 2))
    elif tamper == "corrupt head, checksum fixed":
        _replace(session, state=_with_crc(_flip(row.state, row.state.index(_head(row)) + 20)))
    elif tamper == "not a snapshot":
        _replace(session, state=b"\x00" * 40)
    else:  # a snapshot of another session, stored under this one's key
        other = services.create_session(user=user, title="other")
        for n in range(3):
            turn(other, n)
        store(other)
        _replace(session, state=stored(other).state)
    assert_cold_load_is_full(session, from_snapshot=False)
    assert not any(key == "snapshot" for key in cache.stats), cache.stats


@pytest.mark.parametrize("size", [256, 0])
def test_a_chunk_that_does_not_decode_is_derived_instead(session, settings, size):
    """The checksum is right, the head decodes, an items chunk does not: the request
    (from the head) is right, and the first need of an old item derives in full."""
    for n in range(3):
        turn(session, n, tool=n == 2)
    store(session)
    row = stored(session)
    chunk = msgpack.unpackb(row.state[8:])[6][0]
    _replace(session, state=_with_crc(_flip(row.state, row.state.index(chunk) + len(chunk) // 2)))
    settings.FORGE_CONTEXT_CACHE_SIZE = size
    cache.clear()
    assert_equal(session)
    assert cache.stats["snapshot:snapshot chunk unreadable"] == 1, cache.stats
    turn(session, 3)
    store(session)  # cached: from the state derived anew; uncached: the chunk carried on
    cache.clear()
    assert_equal(session)
    assert cache.stats["snapshot:snapshot chunk unreadable"] == (0 if size else 1), cache.stats


def test_a_snapshot_of_a_rolled_back_log_is_ignored(session):
    turn(session, 0)
    with pytest.raises(RuntimeError), transaction.atomic():
        turn(session, 1)
        store(session)
        raise RuntimeError("rolled back")
    assert snapshots.read(tenant_id=session.tenant_id, session_id=session.pk) is None
    store(session)
    with transaction.atomic():
        sid = transaction.savepoint()
        turn(session, 1)
        transaction.savepoint_rollback(sid)
    turn(session, 2)  # the same seqs, other events: the stored key is no longer in the log
    row = stored(session)
    assert row.seq < selectors.log_head(tenant=session.tenant, session=session)[0]
    assert_cold_load_is_full(session)


def test_an_older_writer_never_replaces_a_newer_snapshot(session):
    turn(session, 0)
    store(session)
    old = stored(session)
    turn(session, 1)
    store(session)
    new = stored(session)
    snapshots.write(
        tenant_id=session.tenant_id,
        session_id=session.pk,
        seq=old.seq,
        hash=old.hash,
        version=old.version,
        state=old.state,
    )
    assert stored(session) == new


# --- a cache: not exported, imported or forked; deleted with the session ----------------


def test_snapshots_are_not_carried_and_go_with_the_session(session, user):
    for n in range(3):
        turn(session, n)
    store(session)
    exported = list(selectors.export_lines(session=session))
    assert not any("FCS" in line for line in exported)
    imported = services.import_log(user=user, events=services.parse_log(exported))
    assert not ContextSnapshot.objects.filter(session_id=imported.pk).exists()
    history = list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    fork = services.fork_session(
        session=session, user=user, before_message_id=history[-1]["info"]["id"]
    )
    assert not ContextSnapshot.objects.filter(session_id=fork.pk).exists()
    assert_cold_load_is_full(imported, from_snapshot=False)
    services.delete_session(session=session)
    assert not ContextSnapshot.objects.filter(session_id=session.pk).exists()


def test_rebuild_projections_drops_the_snapshots(session):
    turn(session, 0)
    store(session)
    call_command("rebuild_projections", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert not ContextSnapshot.objects.exists()
    assert_cold_load_is_full(session, from_snapshot=False)


def test_snapshots_off_and_the_interval(session, settings):
    turn(session, 0)
    settings.FORGE_CONTEXT_SNAPSHOTS = False
    assert not store(session)
    settings.FORGE_CONTEXT_SNAPSHOTS = True
    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 8
    assert store(session)  # 8 events since none (session.created and a turn)
    turn(session, 1)
    assert not store(session)  # 7 since the stored one
    turn(session, 2)
    assert store(session)
    for size in (256, 0):  # the cache off: the stored seq is read to decide
        settings.FORGE_CONTEXT_CACHE_SIZE = size
        cache.clear()
        turn(session, 3 + size)
        assert not store(session)
        turn(session, 4 + size)
        assert store(session)


def test_a_snapshot_not_due_costs_no_query_when_the_state_is_cached(session, settings):
    """The turn's last write passes what it appended: the cached state knows the seq of
    the snapshot it stored, so a turn that is not due reads nothing."""
    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 10
    turn(session, 0)
    turn(session, 1)
    assert store(session)  # 15 events
    with transaction.atomic():
        appended = [services.update_message(session=session, info={"role": "user"})]
        with CaptureQueriesContext(connection) as queries:
            assert not store_snapshot(session, appended)
    assert len(queries) == 0
    cache.clear()  # not cached: one read of the stored seq
    with CaptureQueriesContext(connection) as queries:
        assert not store_snapshot(session, appended)
    assert len(queries) == 1


# --- property: random logs, snapshots at random points, cold loads == full -----------------


@hsettings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, points=st.lists(st.sampled_from(["store", "cold", "warm"]), min_size=14))
def test_snapshot_and_tail_equal_the_full_derivation(user, ops, points):
    """Turns (with tools), regenerations, pruning, compactions, removals, blocks, rolled
    cuts moved forward, back and removed, unfinished replies: after each, a snapshot is
    stored, or the process goes cold (loads the newest snapshot and folds the tail), or
    stays warm; every load equals the full derivation (the cache's verify too)."""
    session = services.create_session(user=user, title="p")
    cache.clear()
    for n, ((op, arg), point) in enumerate(zip(ops, points, strict=False)):
        _apply(session, op, arg, n)
        if point == "store":
            store(session)
        elif point == "cold":
            cache.clear()
        assert request_bytes(request_for(session)) == request_bytes(full_request(session)), ops[
            : n + 1
        ]
        assert visible_history(session) == full_history(session), ops[: n + 1]
        # what the unpruned outputs cost bounds what pruning could choose (never less)
        derived = cache.peek(session)
        if derived is not None:
            least = sum(candidate_tokens(item["parts"]) for item in full_history(session))
            assert sum(derived.tool_tokens.values()) >= least, ops[: n + 1]
    store(session)
    assert_cold_load_is_full(session)


def test_a_decoded_snapshot_knows_what_its_outputs_cost(session, settings):
    """What the unpruned tool outputs cost is in the snapshot's head: a process that
    never served the session decides that pruning has nothing to do without decoding the
    history's chunks."""
    from forge.context import prune_choice

    for n in range(4):
        turn(session, n, tool=n % 2 == 0)
    request_for(session)
    known = cache.peek(session)
    assert known is not None
    before = dict(known.tool_tokens)
    assert len(before) == 2
    assert store(session)
    cache.clear()
    assert prune_choice(session) == []
    derived = cache.peek(session)
    assert derived is not None
    assert derived.lazy  # the chunks were not decoded
    assert derived.tool_tokens == before
