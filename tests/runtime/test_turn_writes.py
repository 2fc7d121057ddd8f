"""How many transactions a turn's writes cost, and that batching them hides nothing from
clients: every event still reaches the bus as its own frame, in log order, after the
deltas of its part.

The count is taken on the runtime's own database connection (every unit of a turn
runs on its thread): a transaction starts with the statement the connection runs
while no transaction is open (psycopg's transaction status), and it *writes the
log* when one of its statements inserts an event. PostgreSQL only: there the
driver says when a transaction is open. The frames are checked on both stacks."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from forge.db.worker import db
from forge.runtime import start_turn
from sessions import sql

from .conftest import alog
from .test_turns import text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

_WRITE = re.compile(r"(^|;)\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)


class Transactions:
    """The transactions run on one connection, as lists of their statements."""

    def __init__(self) -> None:
        self.statements: list[list[str]] = []

    def __call__(self, execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        from psycopg import pq

        raw = context["connection"].connection
        if raw.info.transaction_status == pq.TransactionStatus.IDLE or not self.statements:
            self.statements.append([])
        self.statements[-1].append(query)
        return execute(query, params, many, context)

    def writing(self) -> list[list[str]]:
        """The transactions that changed anything."""
        return [t for t in self.statements if any(_WRITE.search(q) for q in t)]

    def logging(self) -> list[int]:
        """For each transaction that appended to the log, how many events it appended."""
        marker = f"INSERT INTO {sql.EVENT} "
        counts = [sum(q.count(marker) for q in t) for t in self.statements]
        return [n for n in counts if n]


@pytest.fixture
async def transactions() -> AsyncIterator[Transactions]:
    """Count on the runtime's database thread, for the test's duration."""
    counter = Transactions()
    await db(lambda: connection.execute_wrappers.append(counter))()
    yield counter
    await db(lambda: connection.execute_wrappers.remove(counter))()


def assert_frames_follow_the_log(frames: list[dict[str, Any]], log: list[dict[str, Any]]) -> None:
    """Every event of ``log`` reached the bus as a frame of its own, in log order.

    On the embedded stack exactly; channels-redis may drop a frame (the bus is
    at-most-once; clients repair gaps from the log), so on the server stack the frames
    that came must be the log's, in its order."""
    events = [(f["seq"], f["id"], f["type"], f["data"]) for f in frames if f["kind"] == "event"]
    expected = [(e["seq"], e["id"], e["type"], e["data"]) for e in log]
    if settings.FORGE_TEST_STACK == "embedded":
        assert events == expected
    else:
        assert [e for e in expected if e in events] == events
        assert len(events) >= len(expected) - 1


async def turn(session: Any, text: str = "go") -> Any:
    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, timeout=30)
    return started


@pytest.mark.postgres_only
async def test_a_simple_turn_writes_its_log_in_three_transactions(
    session, agents, script, record, transactions
):
    script([text_reply("a short answer in a few words")] * 2)
    await turn(session, "warm up")  # the first turn also logs the agent's context blocks
    recorder = await record(session)
    transactions.statements.clear()
    await turn(session)
    frames = await recorder.settle()
    # The prompt (user message, its text, the empty reply); the step-start with the
    # text part opening; the finished text with the step-finish and the reply's
    # completion: the script yields its finish-step right after the text's end, so
    # nothing is left to wait for (``forge.runtime.readahead``; a text whose step goes on
    # is written at its end: test_abort_and_recovery's finished-text tests).
    assert transactions.logging() == [3, 2, 3]
    # With the lease: taken in the prompt's transaction, given back in the completion's.
    assert len(transactions.writing()) == 3
    assert any("DELETE FROM" in q and "lease" in q for q in transactions.writing()[-1])
    assert_frames_follow_the_log(frames, (await alog(session))[-8:])


@pytest.mark.postgres_only
async def test_a_tool_step_batches_what_it_holds_with_the_next_write(
    session, agents, script, transactions
):
    reply = [tool_reply("read_file", '{"path": "missing.txt"}'), text_reply("no such file")]
    script(reply * 2)  # a reply for each step of each turn
    await turn(session, "warm up")
    transactions.statements.clear()
    await turn(session)
    assert transactions.logging() == [
        3,  # the prompt
        2,  # step-start, the tool part pending
        2,  # the tool running and the step-finish: the model's call is over, the tool runs
        1,  # the tool's error (the file is missing)
        1,  # the message update that ends step 1
        2,  # step-start, the text part opening
        3,  # the finished text, its step-finish right behind it, the reply's completion
    ]


async def test_each_event_is_a_frame_in_log_order_after_the_deltas_of_its_part(
    session, agents, script, record
):
    script([text_reply(" ".join(f"w{i}" for i in range(50)))])
    recorder = await record(session)
    await turn(session)
    frames = await recorder.settle()
    log = await alog(session)
    assert_frames_follow_the_log(frames, log[1:])
    text = next(
        e for e in reversed(log) if e["type"] == "part.updated" and e["data"]["type"] == "text"
    )
    finished = [i for i, f in enumerate(frames) if f.get("id") == text["id"]]
    deltas = [i for i, f in enumerate(frames) if f.get("part_id") == text["data"]["id"]]
    assert deltas
    assert finished or settings.FORGE_TEST_STACK != "embedded"
    assert all(max(deltas) < i for i in finished)
    assert "".join(frames[i]["delta"] for i in deltas) == text["data"]["text"]
