"""The recall tools: history_search (FTS5 / PostgreSQL full text) and history_read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.context.boundary import record_compaction
from forge.tools import ToolContext, ToolError
from forge.tools.recall import history_read, history_search
from sessions import services
from sessions.exceptions import InvalidCursor
from sessions.recall import search_history

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

DONE = "2026-11-30T00:00:01.000Z"


def _exchange(session: Any, question: str, answer: str) -> str:
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(
        session=session, part={"message_id": user, "type": "text", "text": question}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user, "completed_at": DONE}
    ).data["id"]
    services.update_part(
        session=session, part={"message_id": reply, "type": "text", "text": answer}
    )
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "tool",
            "call_id": f"c{user}",
            "tool": "read_file",
            "state": {
                "status": "completed",
                "input": {"path": "notes.txt"},
                "output": f"the file says {answer} " + "z" * 6000,
                "title": "",
                "metadata": {},
                "time": {"start": DONE, "end": DONE},
            },
        },
    )
    return user


def ctx(session: Any) -> ToolContext:
    return ToolContext(
        session_id=session.pk,
        tenant_id=session.tenant_id,
        message_id="msg_x",
        call_id="c",
        agent="build",
        workspace=Path("/nonexistent"),
        abort=asyncio.Event(),
    )


@pytest.fixture
def history(session: Any, other_user: Any) -> dict[str, str]:
    ids = {
        "oldest": _exchange(session, "Where is the marmalade archive?", "in the cellar"),
        "middle": _exchange(session, "And the kiwi ledger?", "upstairs"),
    }
    record_compaction(
        session, summary="S", auto=False, overflow=False, tail_start_id=None, model="x/y"
    )
    ids["newest"] = _exchange(session, "Marmalade again: which shelf?", "the top shelf")
    # another session (another tenant) with the same words is never found
    stranger = services.create_session(user=other_user)
    _exchange(stranger, "marmalade archive elsewhere", "nope")
    return ids


def test_search_finds_hidden_turns_ranked_with_message_ids(session, history):
    hits = search_history(tenant=session.tenant, session=session, query="marmalade")
    found = {hit.message_id for hit in hits}
    assert history["oldest"] in found
    assert history["newest"] in found
    assert all(hit.role == "user" for hit in hits)
    both = search_history(tenant=session.tenant, session=session, query="marmalade archive")
    assert [hit.message_id for hit in both] == [history["oldest"]]
    assert "archive" in both[0].snippet
    # tool outputs are searchable too
    tools = search_history(tenant=session.tenant, session=session, query="cellar file")
    assert tools
    assert tools[0].role == "assistant"


def test_search_refuses_an_empty_query(session, history):
    with pytest.raises(InvalidCursor):
        search_history(tenant=session.tenant, session=session, query="  ")


@pytest.mark.parametrize("query", [" ?! ", "\U0001f600", "\u3002\uff0c", "%"])
def test_a_query_of_no_word_finds_nothing(session, history, query):
    """QA (LOW): emoji or punctuation alone was a tool error here, an empty result in
    memory search; nothing to find is an empty result on both."""
    assert search_history(tenant=session.tenant, session=session, query=query) == []


async def test_the_tools(session, history):
    found = await history_search(ctx(session), {"query": "kiwi ledger"})
    assert history["middle"] in found.output
    read = await history_read(ctx(session), {"ids": [history["middle"]]})
    assert "And the kiwi ledger?" in read.output
    ranged = await history_read(ctx(session), {"start": history["oldest"], "limit": 4})
    assert "marmalade archive" in ranged.output
    assert "more characters]" in ranged.output  # each output is capped
    assert len(ranged.output) < 20_100
    with pytest.raises(ToolError):
        await history_read(ctx(session), {})
    with pytest.raises(ToolError):
        await history_search(ctx(session), {"query": ""})


@pytest.mark.parametrize(
    ("said", "query"),
    [
        ("我昨天喝了咖啡\uff0c在杭州市中山路。", "咖啡"),
        ("我昨天喝了咖啡\uff0c在杭州市中山路。", "杭州"),
        ("昨日は友達とラーメンを食べました。", "ラーメン"),
        ("저는 서울에 살고 있어요.", "서울"),
        ("我昨天喝了咖啡\uff0c在杭州市中山路。", "咖啡 杭州"),  # every word must match
        ("The 咖啡 was from Yunnan province.", "yunnan 咖啡"),  # mixed scripts
    ],
)
def test_search_finds_a_cjk_word_inside_a_sentence(session, history, said, query):
    """A QA finding: Chinese, Japanese and Korean are written without spaces between
    words (or with particles joined to them), so the full-text index holds a whole run
    as one token and ``咖啡`` did not find ``我昨天喝了咖啡``. A query word in those
    scripts is now matched as a substring of the session's parts."""
    said_in = _exchange(session, said, "好的")
    _exchange(session, "别的话题", "其他")
    hits = search_history(tenant=session.tenant, session=session, query=query)
    assert [hit.message_id for hit in hits] == [said_in]
    assert query.split()[-1] in hits[0].snippet
    assert search_history(tenant=session.tenant, session=session, query=query + " 不在") == []


def test_a_cjk_search_stays_in_its_session(session, history, other_user):
    stranger = services.create_session(user=other_user)
    _exchange(stranger, "我昨天喝了咖啡", "好")
    assert search_history(tenant=session.tenant, session=session, query="咖啡") == []


@pytest.mark.parametrize(
    ("said", "query"), [("Le café était très bon.", "cafe"), ("a cafe", "café")]
)
def test_search_folds_accents_on_both_engines(session, history, said, query):
    """A QA finding: PostgreSQL's index keeps accents, so ``cafe`` did not find
    ``café`` there (SQLite's folds them). What the index does not find is looked for
    again with accents folded on both sides."""
    said_in = _exchange(session, said, "oui")
    hits = search_history(tenant=session.tenant, session=session, query=query)
    assert [hit.message_id for hit in hits] == [said_in]
    assert search_history(tenant=session.tenant, session=session, query="cafeteria") == []


@pytest.mark.parametrize("query", ["cafe", "CAF\u00c9"])
def test_accented_and_plain_matches_are_found_together(session, history, query):
    """QA (LOW): on PostgreSQL the folded search ran only when the index found nothing,
    so one message saying "cafe" hid every "Caf\u00e9" (and the reverse)."""
    accented = _exchange(session, "We met at the Caf\u00e9 Zo\u00eb in Porto.", "nice")
    plain = _exchange(session, "Was that cafe nice?", "yes")
    hits = search_history(tenant=session.tenant, session=session, query=query)
    assert {hit.message_id for hit in hits} == {accented, plain}
    assert len(search_history(tenant=session.tenant, session=session, query=query, limit=1)) == 1


@pytest.mark.parametrize(
    ("said", "query"),
    [
        ("Le caf\u00e9 \u00e9tait du 咖啡.", "cafe 咖啡"),
        ("A cafe near 東京 station.", "caf\u00e9 東京"),
        (
            "\u041c\u041e\u0421\u041a\u0412\u0410 和 咖啡",
            "\u043c\u043e\u0441\u043a\u0432\u0430 咖啡",
        ),  # Moscow
        ("\u00dcBER den 東京 Turm", "\u00fcber 東京"),
    ],
)
def test_a_cjk_search_folds_case_and_accents_of_its_other_words(session, history, said, query):
    """QA (LOW): a query with a word in Chinese, Japanese or Korean is matched as
    substrings (``_scan``); on SQLite its other words were matched with SQLite's
    ``lower()``, which folds ASCII letters only, and no accents: ``cafe 咖啡`` did not
    find "café … 咖啡", nor a Cyrillic word in lower case its upper case, as the query without
    the CJK word (the index) and PostgreSQL do."""
    said_in = _exchange(session, said, "好的")
    hits = search_history(tenant=session.tenant, session=session, query=query)
    assert [hit.message_id for hit in hits] == [said_in]


async def test_the_search_leaves_out_the_reply_that_calls_it(session, history):
    """A QA finding: the running call's own input holds the query, so the calling reply's
    tool part was always the first hit."""
    from dataclasses import replace

    def calling_reply() -> str:
        asked = services.update_message(session=session, info={"role": "user"}).data["id"]
        reply = services.update_message(
            session=session, info={"role": "assistant", "parent_id": asked}
        ).data["id"]
        services.update_part(
            session=session,
            part={
                "message_id": reply,
                "type": "tool",
                "call_id": "c",
                "tool": "history_search",
                "state": {"status": "running", "input": {"query": "kiwi"}, "time": {"start": DONE}},
            },
        )
        return str(reply)

    reply = await database_sync_to_async(calling_reply)()
    found = await history_search(replace(ctx(session), message_id=reply), {"query": "kiwi"})
    assert found.metadata["message_ids"] == [history["middle"]]
