"""How many SQL statements one whole turn runs, pinned, so a regression fails.

Counted on the runtime's own database connection (every unit of a turn runs on its
thread) with ``connection.execute_wrapper``: one count is one ``execute`` the driver
sends. On PostgreSQL that is one round trip (a batch's writes travel as one
multi-statement execute; ``BEGIN`` and ``COMMIT`` are the driver's and not counted);
on SQLite it is one statement (``BEGIN IMMEDIATE`` included: it is executed like
any other), in process.

Each statement is put down to the part of the turn that ran it, by the runtime
function on its stack: the prompt (``prompting.begin``), the steps' start (pruning,
the last step's usage, the first request: ``steps._start_steps``), the step's batch
(``Processor.write``) and the finish (``dialogue.complete_reply``: the last batch, the
memory window append and the lease's release, in one transaction). A release of its
own (``lease.release`` outside the finish: a reply that did not complete) would show
as "release". The turn is a speaker's second with the agent (its memory core exists,
nothing rolled yet): the turn every conversation runs from then on.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from types import FrameType
from typing import Any

import pytest
from django.db import connection

from forge.db.worker import db
from forge.runtime import start_turn

from .test_turns import text_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

# Runtime function (code name, file ending) -> the part of the turn it is.
PHASES = {
    ("begin", "runtime/prompting.py"): "prompt",
    ("_start_steps", "runtime/steps.py"): "steps start",
    ("complete_reply", "runtime/dialogue.py"): "finish",
    ("release", "runtime/lease.py"): "release",
    # A step's batch runs ``services.append_batch`` itself on the database thread
    # (``Processor.write``); the prompt's and the finish's run inside their unit.
    ("append_batch", "services/batch.py"): "step batch",
}


class Statements:
    """The statements run on one connection, each with the part of the turn that ran it."""

    def __init__(self) -> None:
        self.phases: Counter[str] = Counter()
        self.queries: list[tuple[str, str]] = []

    def __call__(self, execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        phase = "other"
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            found = next(
                (p for (name, end), p in PHASES.items() if code.co_name == name
                 and code.co_filename.replace("\\", "/").endswith(end)),
                None,
            )  # fmt: skip
            if found is not None:
                phase = found  # the outermost wins: a unit's batch is the unit's
            frame = frame.f_back
        self.phases[phase] += 1
        self.queries.append((phase, query))
        return execute(query, params, many, context)


async def turn(session: Any, text: str) -> None:
    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, timeout=30)


# Pinned counts per stack: (prompt, steps start, step batch, finish). The prompt
# includes the budget check (one read, forge.usage.budgets) and the finish the usage
# UPSERT (forge.usage: the reply's parts come from the exchange read already made).
EXPECTED = {
    "embedded": {"prompt": 13, "steps start": 2, "step batch": 4, "finish": 11},
    "server": {"prompt": 9, "steps start": 2, "step batch": 2, "finish": 7},
}


async def test_a_whole_turn_runs_a_pinned_number_of_statements(session, agents, script, settings):
    settings.FORGE_CONTEXT_VERIFY = False  # the tests' check against the full derivation
    script([text_reply("a short answer in a few words")] * 3)
    await turn(session, "warm up")  # logs the agent's context blocks, creates the core
    await turn(session, "and again")
    counter = Statements()
    await db(lambda: connection.execute_wrappers.append(counter))()
    try:
        await turn(session, "go")
    finally:
        await db(lambda: connection.execute_wrappers.remove(counter))()
    expected = EXPECTED[settings.FORGE_TEST_STACK]
    listing = "\n".join(f"{phase}: {query[:120]}" for phase, query in counter.queries)
    assert dict(counter.phases) == expected, listing
    assert sum(counter.phases.values()) == sum(expected.values())
