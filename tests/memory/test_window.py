"""The dialogue window: append_dialogue creates the core and appends cheaply and safely."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from memory import services
from memory.exceptions import InvalidInput, TenantMismatch
from memory.models import DialogueMessage, MemoryCore

from .conftest import turn

pytestmark = pytest.mark.django_db


def test_the_first_append_creates_the_core(tenant, user):
    core = services.append_dialogue(tenant=tenant, user=user, agent="build", messages=turn(0))
    assert core.pk.startswith("mco_")
    assert core.memory_session_id.startswith("mss_")
    stored = MemoryCore.objects.get(pk=core.pk)
    assert (stored.window_count, stored.window_next_seq, stored.rolled_seq) == (2, 2, 0)
    assert stored.last_interaction_at is not None
    rows = list(DialogueMessage.objects.filter(core=core).order_by("seq"))
    assert [(r.seq, r.role, r.text) for r in rows] == [
        (0, "user", "Question 0 about topic0. More detail here."),
        (1, "assistant", "Answer 0 on topic0. Further words."),
    ]
    assert all(r.tenant_id == tenant.pk for r in rows)


def test_later_appends_go_to_the_same_core_one_per_user_and_agent(tenant, user, talker):
    first = talker(turns=2)
    again = services.append_dialogue(
        tenant=tenant,
        user=user,
        agent="build",
        messages=[
            {
                "role": "user",
                "text": "hi",
                "at": "2026-11-30T10:00:00Z",
                "session_id": "ses_1",
                "message_id": "msg_1",
            }
        ],
    )
    other_agent = talker(agent="explore")
    assert again.pk == first.pk
    assert other_agent.pk != first.pk
    assert MemoryCore.objects.get(pk=first.pk).window_count == 5
    last = DialogueMessage.objects.get(core=first, seq=4)
    assert (last.session_id, last.message_id, last.at.isoformat()) == (
        "ses_1",
        "msg_1",
        "2026-11-30T10:00:00+00:00",
    )


def test_an_append_is_a_few_statements_whatever_the_history(tenant, user, talker):
    talker(turns=50)
    with CaptureQueriesContext(connection) as queries:
        services.append_dialogue(tenant=tenant, user=user, agent="build", messages=turn(99))
    statements = [
        q["sql"]
        for q in queries.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    # membership check, lock the core, insert the messages, advance the counters
    assert len(statements) == 4, statements


@pytest.mark.parametrize(
    ("agent", "messages"),
    [
        ("", turn(0)),
        ("x" * 65, turn(0)),
        (None, turn(0)),
        ("build", [{"role": "wizard", "text": "x"}]),
        ("build", "hello"),
    ],
)
def test_bad_input_is_refused_and_nothing_written(tenant, user, agent, messages):
    with pytest.raises(InvalidInput):
        services.append_dialogue(tenant=tenant, user=user, agent=agent, messages=messages)
    assert not MemoryCore.objects.exists()


def test_a_user_of_another_tenant_is_refused(tenant, other_user):
    with pytest.raises(TenantMismatch) as info:
        services.append_dialogue(tenant=tenant, user=other_user, agent="build", messages=turn(0))
    assert info.value.code == "tenant_mismatch"
    assert not MemoryCore.objects.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_concurrent_turns_of_one_core_never_share_a_seq(tenant, user):
    """Eight threads append 10 turns each to one (new) core at once."""
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        try:
            start.wait()
            for i in range(10):
                services.append_dialogue(
                    tenant=tenant,
                    user=user,
                    agent="build",
                    messages=[
                        {"role": "user", "text": f"w{n} t{i} q"},
                        {"role": "assistant", "text": f"w{n} t{i} a"},
                    ],
                )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    core = MemoryCore.objects.get()
    assert (core.window_count, core.window_next_seq) == (160, 160)
    rows = list(DialogueMessage.objects.filter(core=core).order_by("seq"))
    assert [r.seq for r in rows] == list(range(160))
    # A turn's two messages stay together.
    for question, answer in zip(rows[::2], rows[1::2], strict=True):
        assert question.text[:-1] == answer.text[:-1]
