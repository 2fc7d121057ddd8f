"""Search answers depend on the caller's own data only (issue 17, MEDIUM 7).

SQLite's FTS5 ranks with bm25, whose word statistics (how many rows hold a word,
the average row length) cover the whole index, every tenant's rows included. A
tenant that could see its own scores, or the order they give, could watch them
move while another tenant's memory or history gained a word. So memory search
(``/api/memory/search/``, ``memory_search``) and ``history_search`` answer ranks,
not scores, and order by measures of the searched data alone: a tenant's answer
to a query is byte for byte the same, whatever other tenants write, as long as its
own data did not change. Run on both stacks (PostgreSQL's ``ts_rank_cd`` and
``ts_rank`` are per document already).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from rest_framework.test import APIClient

from memory import search, services
from memory.models import MemoryCore, MemorySlice
from sessions import services as session_services
from sessions.services import create_session
from tests.tools import call, make_context

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

QUERY = "apple banana"


@pytest.fixture
def other_tenant(other_user: Any) -> Any:
    return other_user.tenants.get()


def summarized(tenant: Any, user: Any, summary: str, agent: str = "build") -> MemorySlice:
    """A slice with this summary in the core of (tenant, user, agent), indexed."""
    services.append_dialogue(
        tenant=tenant, user=user, agent=agent, messages=[{"role": "user", "text": "hi"}]
    )
    core = MemoryCore.objects.get(tenant=tenant, user=user, agent=agent)
    _unit, item = services.update_memory_unit(
        tenant=tenant, core=core, messages=[{"role": "user", "text": summary}], summary=summary
    )
    search.index_slices([item.pk])
    return item


def others_write_memory(other_tenant: Any, other_user: Any) -> None:
    """The other tenant's memory gains the query's words, many times over."""
    for n in range(6):
        summarized(other_tenant, other_user, f"Banana split number {n}: banana, banana bread.")
    summarized(other_tenant, other_user, "Apple and banana smoothies with apple juice.")


# --- memory search ------------------------------------------------------------------------------


@pytest.fixture
def apples(tenant: Any, user: Any) -> dict[str, MemorySlice]:
    """Two slices of the caller's memory that match one word of the query each."""
    return {
        "apple": summarized(tenant, user, "We talked about the apple orchard today."),
        "banana": summarized(tenant, user, "We talked about the banana harvest today."),
    }


def test_memory_search_answers_the_same_bytes_whatever_another_tenant_writes(
    api: APIClient, apples, other_tenant, other_user
):
    before = api.get(f"/api/memory/search/?q={QUERY}")
    assert before.status_code == 200
    hits = before.json()["results"]
    assert {hit["slice"]["id"] for hit in hits} == {item.pk for item in apples.values()}

    others_write_memory(other_tenant, other_user)

    after = api.get(f"/api/memory/search/?q={QUERY}")
    assert after.content == before.content
    assert [hit["rank"] for hit in hits] == [1, 2]
    for hit in hits:
        assert set(hit) == {"slice", "unit_id", "core_id", "agent", "rank", "matched", "messages"}


def test_memory_search_order_is_the_tenants_own(api: APIClient, tenant, user, apples, settings):
    """Within the searched memory the word statistics do count: a slice matching a word
    few of its slices hold ranks above one matching a common word (the full-text
    ranking, seen alone with vectors off; cosines have no corpus statistics). Here
    "banana" is in five of six slices: under a quarter of "apple"'s weight, it is not a
    salient term of the query (memory.search.salient), so slices holding only it are
    no hit at all, by this memory's own statistics too."""
    settings.FORGE_MEMORY_VECTORS = False
    for n in range(4):
        summarized(tenant, user, f"Banana note {n}.")
    hits = api.get(f"/api/memory/search/?q={QUERY}").json()["results"]
    assert hits[0]["slice"]["id"] == apples["apple"].pk  # apple: rarer in this memory
    assert [hit["rank"] for hit in hits] == list(range(1, len(hits) + 1))
    # Only the apple slice: the banana-only ones hold no salient term of the query.
    assert [hit["slice"]["id"] for hit in hits] == [apples["apple"].pk]


async def test_memory_search_tool_answers_the_same_whatever_another_tenant_writes(
    session, user, apples, other_tenant, other_user, tmp_path: Path
):
    def spoken() -> str:
        said = {"user_id": user.pk}
        asked = session_services.update_message(session=session, info={"role": "user", **said})
        reply = session_services.update_message(
            session=session, info={"role": "assistant", "parent_id": asked.data["id"], **said}
        )
        return str(reply.data["id"])

    ctx = make_context(
        tmp_path,
        session_id=session.pk,
        tenant_id=session.tenant_id,
        message_id=await database_sync_to_async(spoken)(),
    )
    before = await call("memory_search", {"query": QUERY}, ctx)
    await database_sync_to_async(others_write_memory)(other_tenant, other_user)
    after = await call("memory_search", {"query": QUERY}, ctx)
    assert (after.output, after.metadata) == (before.output, before.metadata)
    assert "score" not in before.output


# --- history search -----------------------------------------------------------------------------

FILLER = "nothing to see in this part at all"


def conversation(user: Any, texts: list[str]) -> Any:
    """A session whose assistant message holds one text part per text."""
    session = create_session(user=user, title="history")
    asked = session_services.update_message(session=session, info={"role": "user"})
    reply = session_services.update_message(
        session=session, info={"role": "assistant", "parent_id": asked.data["id"]}
    )
    for text in texts:
        session_services.update_part(
            session=session,
            part={"message_id": reply.data["id"], "type": "text", "text": text},
        )
    return session


async def history_answer(session: Any, tmp_path: Path) -> tuple[str, Any]:
    ctx = make_context(tmp_path, session_id=session.pk, tenant_id=session.tenant_id)
    result = await call("history_search", {"query": QUERY}, ctx)
    return result.output, result.metadata


async def test_history_search_answers_the_same_whatever_another_tenant_writes(
    user, other_user, tmp_path: Path
):
    # Two parts hold both words, in opposite proportions; the rest hold neither.
    mine = await database_sync_to_async(conversation)(
        user,
        [
            "apple apple apple banana and more words here",
            "apple banana banana banana and more words here",
            *[FILLER] * 4,
        ],
    )
    before = await history_answer(mine, tmp_path)
    assert before[0].count("\n") == 1  # two hits

    def others_talk() -> None:
        for _ in range(3):
            conversation(other_user, ["banana " * 20, "banana bread", "apple banana"])

    await database_sync_to_async(others_talk)()
    assert await history_answer(mine, tmp_path) == before


def test_history_hits_carry_ranks(user: Any) -> None:
    from sessions.recall import search_history

    session = conversation(user, ["apple banana", "apple banana apple banana", FILLER])
    hits = search_history(tenant=session.tenant, session=session, query=QUERY)
    assert [hit.rank for hit in hits] == [1, 2]
    assert "apple banana apple banana" in hits[0].snippet  # more of the words: first
