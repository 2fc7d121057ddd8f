"""Reads: cursor-paged history, the log after a seq, and tenant scoping on every selector."""

import time

import pytest

from sessions import selectors, services
from sessions.exceptions import InvalidCursor, NotFound

pytestmark = pytest.mark.django_db


@pytest.fixture
def long_session(session):
    for n in range(120):
        role = "user" if n % 2 == 0 else "assistant"
        message_id = services.update_message(session=session, info={"role": role}).data["id"]
        for k in range(2):
            services.update_part(
                session=session,
                part={"message_id": message_id, "type": "text", "text": f"m{n} p{k}"},
            )
    return session


def texts(page):
    return [item["parts"][0]["text"].split()[0] for item in page.items]


def test_pages_go_newest_first_with_items_oldest_first(long_session, tenant):
    first = selectors.message_page(tenant=tenant, session_id=long_session.pk)
    assert texts(first) == [f"m{n}" for n in range(70, 120)]
    assert [len(item["parts"]) for item in first.items] == [2] * 50
    assert [p["text"] for p in first.items[0]["parts"]] == ["m70 p0", "m70 p1"]
    second = selectors.message_page(
        tenant=tenant, session_id=long_session.pk, before=first.next_before
    )
    assert texts(second) == [f"m{n}" for n in range(20, 70)]
    last = selectors.message_page(
        tenant=tenant, session_id=long_session.pk, before=second.next_before
    )
    assert texts(last) == [f"m{n}" for n in range(20)]
    assert last.next_before is None


def test_a_page_costs_three_queries_whatever_its_size(
    long_session, tenant, django_assert_num_queries
):
    with django_assert_num_queries(3):
        page = selectors.message_page(tenant=tenant, session_id=long_session.pk, limit=200)
    assert len(page.items) == 120


def test_page_limits_and_cursors_are_checked(session, tenant):
    for limit in (0, 201, -1, "10"):
        with pytest.raises(InvalidCursor, match="limit"):
            selectors.message_page(tenant=tenant, session_id=session.pk, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidCursor, match="before"):
        selectors.message_page(tenant=tenant, session_id=session.pk, before="no spaces allowed")
    assert selectors.message_page(tenant=tenant, session_id=session.pk).items == []


def test_iter_history_reads_everything_oldest_first(long_session, tenant):
    history = list(selectors.iter_history(tenant=tenant, session_id=long_session.pk, batch=7))
    assert [item["parts"][0]["text"].split()[0] for item in history] == [
        f"m{n}" for n in range(120)
    ]


def test_events_after_a_seq(long_session, tenant):
    events = selectors.events_after(tenant=tenant, session_id=long_session.pk, after=5, limit=3)
    assert [e["seq"] for e in events] == [6, 7, 8]
    assert set(events[0]) == {"seq", "id", "session_id", "type", "at", "data"}
    everything = selectors.events_after(tenant=tenant, session_id=long_session.pk)
    assert [e["seq"] for e in everything] == list(range(1, 362))
    with pytest.raises(InvalidCursor):
        selectors.events_after(tenant=tenant, session_id=long_session.pk, after=-1)


def test_another_tenant_sees_nothing(session, other_user):
    stranger = other_user.memberships.get().tenant
    for read in (
        lambda: selectors.get_session(tenant=stranger, session_id=session.pk),
        lambda: selectors.message_page(tenant=stranger, session_id=session.pk),
        lambda: selectors.events_after(tenant=stranger, session_id=session.pk),
        lambda: list(selectors.iter_history(tenant=stranger, session_id=session.pk)),
    ):
        with pytest.raises(NotFound):
            read()
    assert list(selectors.list_sessions(tenant=stranger)) == []


def test_sessions_are_listed_most_recently_active_first(user, tenant):
    older = services.create_session(user=user, title="older")
    time.sleep(0.002)  # activity times have millisecond resolution
    newer = services.create_session(user=user, title="newer")
    assert list(selectors.list_sessions(tenant=tenant)) == [newer, older]
    time.sleep(0.002)
    services.update_message(session=older, info={"role": "user"})
    assert list(selectors.list_sessions(tenant=tenant)) == [older, newer]
