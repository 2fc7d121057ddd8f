"""Context snapshots through the runtime: the turn's last write stores one
(``forge.runtime.dialogue.complete_reply``), and with the cache off every step's
request is loaded from the newest snapshot and the events after it. Scripted sessions
with tool calls, automatic and manual compactions, pruning and context blocks
(``tests.runtime.test_context_property``); ``FORGE_CONTEXT_VERIFY`` compares every
load with the full derivation."""

from __future__ import annotations

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from forge import runtime
from forge.context import request_for, visible_history
from forge.context.incremental import cache, full_request, request_bytes
from forge.context.visible import visible_history as full_history
from sessions import selectors, services, snapshots
from tests.runtime.test_context_property import actions, requests, run_script, scripted

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

__all__ = ["scripted"]  # the fixture, used by name


def test_a_turn_stores_its_snapshot_at_its_last_write(user, agents, scripted, settings):
    settings.FORGE_CONTEXT_SNAPSHOT_EVENTS = 1
    session = services.create_session(user=user)
    runtime.prompt(session=session, text="hello there USE_TOOL", wait=True)
    row = snapshots.read(tenant_id=session.tenant_id, session_id=session.pk)
    assert row is not None
    assert (row.seq, row.hash) == selectors.log_head(tenant=session.tenant, session=session)


@given(script=actions, window=st.sampled_from([400, 900, 100_000]), cold=st.booleans())
@hsettings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_step_loads_from_the_snapshot_exactly(user, agents, scripted, script, window, cold):
    requests.clear()
    cache.clear()
    with override_settings(
        FORGE_CONTEXT_VERIFY=True,
        FORGE_CONTEXT_SNAPSHOT_EVENTS=1,
        FORGE_CONTEXT_CACHE_SIZE=0 if cold else 256,
        FORGE_CONTEXT_LIMIT_DEFAULT=window,
        FORGE_COMPACT_TAIL_TOKENS=60,
        FORGE_PRUNE_PROTECT_TOKENS=20,
    ):
        session = services.create_session(user=user)
        run_script(session, script)
        turns = sum(1 for action in script if action[0] == "turn")
        if cold and turns >= 2:  # each later step read the snapshot an earlier turn stored
            tried = sum(n for key, n in cache.stats.items() if key.startswith("snapshot"))
            assert tried >= 1, cache.stats
        cache.clear()
        assert request_bytes(request_for(session)) == request_bytes(full_request(session))
        assert visible_history(session) == full_history(session)
