"""The model's memory tools, ``memory_search`` and ``memory_read``, against the real
database: called the way the runtime calls them (prepare, then execute, DB work on
another thread, hence transactional tests), and once through a whole scripted turn."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.runtime import start_turn
from forge.tools import ToolContext, ToolError
from forge.tools import memory as memory_tools
from memory import search, services
from memory.embeddings.base import Embedder
from memory.embeddings.offline import OfflineEmbedder
from memory.models import MemoryCore, MemorySlice, MemoryUnit

from . import call, make_context

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def remember(tenant: Any, user: Any, agent: str, *texts: str) -> MemoryCore:
    """One exchange per text, then a rolling: a unit and a slice summarizing them."""
    core = None
    for text in texts:
        core = services.append_dialogue(
            tenant=tenant,
            user=user,
            agent=agent,
            messages=[
                {"role": "user", "text": f"{text}."},
                {"role": "assistant", "text": f"Noted about {text}."},
            ],
        )
    assert core is not None
    services.roll_core(tenant=tenant, core=core, keep=0)  # all of it: none kept unrolled
    search.index_pending()
    core.refresh_from_db()
    return core


def slice_of(core: MemoryCore) -> MemorySlice:
    return MemorySlice.objects.get(unit__core=core)


@pytest.fixture
def carol(tenant: Any) -> Any:
    """Another user of alice's tenant."""
    from accounts.models import Membership, User

    carol = User.objects.create_user(username="carol", password="pw-carol-123")
    Membership.objects.create(tenant=tenant, user=carol)
    return carol


@pytest.fixture
def memories(tenant: Any, user: Any, carol: Any, other_user: Any) -> dict[str, MemoryCore]:
    """Rocket talk everywhere; only ``mine`` is the session owner's with ``build``."""
    return {
        "mine": remember(tenant, user, "build", "We deployed the rocket service", "Coffee"),
        "my_explore": remember(tenant, user, "explore", "Rocket engines in the repository"),
        "carols": remember(tenant, carol, "build", "Carol's secret rocket launch codes"),
        "foreign": remember(
            other_user.tenants.get(), other_user, "build", "Another tenant's rocket plans"
        ),
    }


def spoken(session: Any, speaker: Any | None) -> str:
    """A prompt and its reply, logged as a turn of ``speaker`` logs them (None: as before
    speakers were recorded); the reply's id, which a tool call's context names."""
    from sessions import services

    said = {} if speaker is None else {"user_id": speaker.pk}
    asked = services.update_message(session=session, info={"role": "user", **said})
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": asked.data["id"], **said}
    )
    return str(reply.data["id"])


@pytest.fixture
def ctx(session: Any, user: Any, tmp_path: Path) -> ToolContext:
    """A call in a turn of alice (the session's owner)."""
    return make_context(
        tmp_path,
        session_id=session.pk,
        tenant_id=session.tenant_id,
        message_id=spoken(session, user),
    )


def indexes(output: str) -> list[int]:
    """The message indexes a ``memory_read`` answer shows."""
    return [int(m) for m in re.findall(r"^\[(\d+)\] ", output, re.MULTILINE)]


async def refused(name: str, args: dict[str, Any], ctx: ToolContext) -> str:
    with pytest.raises(ToolError) as info:
        await call(name, args, ctx)
    return info.value.message


# --- memory_search --------------------------------------------------------------------------


async def test_search_gives_the_owners_slices_for_this_agent_only(ctx, memories):
    mine = memories["mine"]
    item = await database_sync_to_async(slice_of)(mine)
    result = await call("memory_search", {"query": "rocket"}, ctx)
    assert result.metadata == {"count": 1, "slice_ids": [item.pk], "messages": [[0, 1]]}
    # The best-matching message, quotable: its unit index, role, time and a snippet.
    assert re.search(r"^   \[0\] user \(\d{4}-[^)]+\): We deployed the rocket", result.output, re.M)
    assert f"slice {item.pk}" in result.output
    assert f"unit {item.unit_id}" in result.output
    assert f"messages [{item.start_index}, {item.end_index})" in result.output
    assert f"1. slice {item.pk} | unit" in result.output  # a rank, no score
    assert "score" not in result.output
    assert "We deployed the rocket service" in result.output
    for other in ("Carol", "engines", "Another tenant"):
        assert other not in result.output
    as_explore = dataclasses.replace(ctx, agent="explore")
    explore = await call("memory_search", {"query": "rocket"}, as_explore)
    assert "Rocket engines" in explore.output
    assert "deployed" not in explore.output


async def test_a_hit_by_meaning_alone_is_said_to_be_one(ctx, tenant, user):
    """A fourth-round finding: a word memory never held gave a hit by meaning, and
    nothing told the model that it matched no word (it may be unrelated)."""
    await database_sync_to_async(remember)(tenant, user, "build", "I drink a latte daily")
    result = await call("memory_search", {"query": "espresso"}, ctx)  # near latte
    assert result.metadata["count"] == 1
    assert result.output.startswith("No memory holds the words of 'espresso'.")
    assert "| by meaning only" in result.output
    found = await call("memory_search", {"query": "latte"}, ctx)
    assert found.output.startswith("1 memory slice for 'latte'")
    assert "by meaning only" not in found.output


async def test_search_ranks_and_limits(ctx, tenant, user, memories):
    await database_sync_to_async(remember)(tenant, user, "build", "Rocket rocket rocket fuel")
    both = await call("memory_search", {"query": "rocket fuel"}, ctx)
    assert both.metadata["count"] == 2
    assert both.output.index("Rocket rocket rocket fuel") < both.output.index("We deployed")
    one = await call("memory_search", {"query": "rocket", "limit": 1}, ctx)
    assert one.metadata["count"] == 1


@pytest.mark.parametrize(
    "query", ['"', "rocket*", "NEAR(rocket coffee)", "rocket OR", "((rocket", "---"]
)
async def test_search_takes_any_text_as_plain_words(ctx, memories, query):
    result = await call("memory_search", {"query": query}, ctx)
    assert result.metadata["count"] == (1 if "rocket" in query else 0)
    if "rocket" not in query:
        assert result.output.startswith("No memory matches")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "'query' is a required property"),
        ({"query": ""}, "should be non-empty"),
        ({"query": "x" * 1001}, "is too long"),
        ({"query": "x", "limit": 0}, "less than the minimum"),
        ({"query": "x", "limit": 21}, "greater than the maximum"),
        ({"query": "x", "limit": "5"}, "is not of type 'integer'"),
        ({"query": "x", "user": "carol"}, "Additional properties"),
        ({"query": "rocket\x00"}, "NUL character"),  # the log, which records it, has none
    ],
)
async def test_bad_search_input_is_a_tool_error(ctx, memories, args, message):
    assert message in await refused("memory_search", args, ctx)


async def test_a_session_of_another_tenant_or_a_turn_without_a_speaker_has_no_memory(
    ctx, session, other_user, memories
):
    other_tenant = await database_sync_to_async(lambda: other_user.tenants.get())()
    wrong_tenant = make_context(ctx.workspace, session_id=session.pk, tenant_id=other_tenant.pk)
    assert "no session" in await refused("memory_search", {"query": "rocket"}, wrong_tenant)
    missing = make_context(ctx.workspace, session_id="ses_missing", tenant_id=ctx.tenant_id)
    assert "no session" in await refused("memory_read", {"unit_id": "mun_x"}, missing)
    # A reply logged with no speaker (before speakers were recorded), or one naming a
    # user of another tenant (an imported log may), or no reply at all: nobody's memory.
    for speaker in (None, other_user):
        reply_id = await database_sync_to_async(spoken)(session, speaker)
        unspoken = dataclasses.replace(ctx, message_id=reply_id)
        assert "no speaker" in await refused("memory_search", {"query": "rocket"}, unspoken)
    nowhere = dataclasses.replace(ctx, message_id="msg_missing")
    assert "no speaker" in await refused("memory_read", {"unit_id": "mun_x"}, nowhere)


async def test_the_speaker_not_the_owner_is_whose_memory_a_call_sees(ctx, session, memories):
    """carol speaks in alice's session: her own memory, never alice's (CONTRACT §2)."""
    carol = await database_sync_to_async(lambda: memories["carols"].user)()
    as_carol = dataclasses.replace(
        ctx, message_id=await database_sync_to_async(spoken)(session, carol)
    )
    found = await call("memory_search", {"query": "rocket"}, as_carol)
    assert "Carol's secret rocket launch codes" in found.output
    assert "We deployed" not in found.output
    mine = await database_sync_to_async(slice_of)(memories["mine"])
    message = await refused("memory_read", {"slice_id": mine.pk}, as_carol)
    assert message == f"no memory slice {mine.pk!r}"


# --- memory_read ----------------------------------------------------------------------------


async def test_read_a_slice_gives_the_raw_messages_of_its_range(ctx, memories):
    item = await database_sync_to_async(slice_of)(memories["mine"])
    result = await call("memory_read", {"slice_id": item.pk}, ctx)
    lines = result.output.splitlines()
    assert lines[0].startswith(f"Messages [0, 4) of slice {item.pk} of unit {item.unit_id}")
    assert lines[1].startswith("[0] user (")
    assert lines[1].endswith("): We deployed the rocket service.")
    assert lines[4].startswith("[3] assistant (")
    assert len(lines) == 5
    assert result.metadata["truncated"] is False


async def test_read_a_units_range(ctx, memories):
    item = await database_sync_to_async(slice_of)(memories["mine"])
    part = await call("memory_read", {"unit_id": item.unit_id, "start": 1, "end": 3}, ctx)
    assert [line[:3] for line in part.output.splitlines()[1:]] == ["[1]", "[2]"]
    tail = await call("memory_read", {"unit_id": item.unit_id, "start": 2}, ctx)
    assert tail.output.splitlines()[0].startswith("Messages [2, 4) of unit")
    for start in (50, 2**31 - 1):  # past the unit's end, within an index's range
        beyond = await call("memory_read", {"unit_id": item.unit_id, "start": start}, ctx)
        assert "(no messages in this range)" in beyond.output
    # Past any index a unit can have (32-bit): the schema's maximum, an error the model
    # sees (10**30 was read as an empty range, and 1e30 shown as 10**30 plus some).
    assert "is greater than the maximum of 2147483647" in await refused(
        "memory_read", {"unit_id": item.unit_id, "start": 10**30}, ctx
    )
    assert "must not be below" in await refused(
        "memory_read", {"unit_id": item.unit_id, "start": 3, "end": 1}, ctx
    )


async def test_whole_numbers_written_as_floats_are_integers(ctx, memories):
    """A QA finding: JSON Schema counts ``2.0`` and ``1e3`` as integers, and encoders
    write them; ``start: 2.0`` was refused ("must be a non-negative integer") while
    ``1e3`` went through and was shown as ``1000.0``."""
    item = await database_sync_to_async(slice_of)(memories["mine"])
    part = await call("memory_read", {"unit_id": item.unit_id, "start": 1.0, "end": 3.0}, ctx)
    assert part.output.splitlines()[0].startswith("Messages [1, 3) of unit")
    beyond = await call("memory_read", {"unit_id": item.unit_id, "start": 1e3}, ctx)
    assert beyond.output.splitlines()[0].startswith("Messages [1000, 1000) of unit")
    assert "is not of type 'integer'" in await refused(
        "memory_read", {"unit_id": item.unit_id, "start": 1.5}, ctx
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, 'give either "slice_id", or "unit_id"'),
        ({"slice_id": "msl_x", "unit_id": "mun_x"}, 'give either "slice_id", or "unit_id"'),
        ({"slice_id": "msl_x", "start": 1}, '"start" and "end" go with "unit_id"'),
        ({"unit_id": "mun_x", "start": -1}, "less than the minimum"),
        ({"unit_id": "mun_x", "end": 1.5}, "is not of type 'integer'"),
        # 1e30 is an integer to JSON Schema: it was read from 10**30 on, shown so (QA).
        ({"unit_id": "mun_x", "start": 1e30}, "is greater than the maximum of 2147483647"),
        ({"unit_id": "mun_x", "end": 1e30}, "is greater than the maximum of 2147483647"),
        ({"slice_id": ""}, "should be non-empty"),
        ({"slice_id": "msl_missing"}, "no memory slice 'msl_missing'"),
        ({"unit_id": "not an id"}, "no memory unit 'not an id'"),
    ],
)
async def test_bad_read_input_is_a_tool_error(ctx, memories, args, message):
    assert message in await refused("memory_read", args, ctx)


@pytest.mark.parametrize("whose", ["carols", "foreign", "my_explore"])
async def test_another_users_agents_or_tenants_memory_reads_like_a_missing_one(
    ctx, memories, whose
):
    item = await database_sync_to_async(slice_of)(memories[whose])
    message = await refused("memory_read", {"slice_id": item.pk}, ctx)
    assert message == f"no memory slice {item.pk!r}"
    message = await refused("memory_read", {"unit_id": item.unit_id, "start": 0, "end": 4}, ctx)
    assert message == f"no memory unit {item.unit_id!r}"


async def test_a_long_read_is_cut_with_a_note_telling_where_to_continue(ctx, tenant, user):
    def big() -> MemoryUnit:
        core = remember(tenant, user, "build", *[f"Paragraph {i} " + "x" * 6000 for i in range(5)])
        return MemoryUnit.objects.get(core=core)

    unit = await database_sync_to_async(big)()
    first = await call("memory_read", {"unit_id": unit.pk, "start": 0, "end": 10}, ctx)
    assert len(first.output) <= memory_tools.READ_MAX_CHARS + 300
    assert first.metadata["truncated"] is True
    resume = first.metadata["end"]
    assert 0 < resume < 10
    assert f'"start": {resume}, "end": 10' in first.output.splitlines()[-1]
    seen = indexes(first.output)
    while resume < 10:
        more = await call("memory_read", {"unit_id": unit.pk, "start": resume, "end": 10}, ctx)
        seen += indexes(more.output)
        resume = more.metadata["end"]
    assert seen == list(range(10))  # every message once, in order


async def test_one_huge_message_is_read_on_from_an_offset(ctx, tenant, user):
    """QA (LOW): a message over the read's characters showed its start, and the
    continuation moved on to the next message: its tail (memory keeps 100,000
    characters a message) could not be read. The read goes on in it with ``offset``."""
    said = "Log dump " + "".join(f"{i:06d}" for i in range(9_000)) + " ZEBRA9931"

    def huge() -> MemoryUnit:
        return MemoryUnit.objects.get(core=remember(tenant, user, "build", said))

    unit = await database_sync_to_async(huge)()
    args: dict[str, Any] = {"unit_id": unit.pk}
    pieces = []
    for _ in range(5):
        result = await call("memory_read", args, ctx)
        assert len(result.output) < memory_tools.READ_MAX_CHARS + 300
        line = next(x for x in result.output.splitlines() if x.startswith("[0] "))
        pieces.append(line.split(": ", 1)[1].removesuffix("…"))
        if "offset" not in result.metadata:
            break
        assert "[message 0 is cut: showed its characters" in result.output
        assert result.metadata["end"] == 0
        hint, end = result.output.splitlines()[-1], result.metadata["requested_end"]
        assert f'"start": 0, "end": {end}, "offset": {result.metadata["offset"]}}}]' in hint
        args = {"unit_id": unit.pk, "start": 0, "end": end, "offset": result.metadata["offset"]}
    assert len(pieces) == 3
    assert "".join(pieces) == said + "."  # (remember's message ends with a full stop)
    assert "[0] user (" in result.output
    assert "from character" in result.output
    # the reply, as long, is where the next read starts
    assert result.metadata["end"] == 1
    assert '"start": 1, "end": 2}]' in result.output.splitlines()[-1]


# --- through a whole turn -------------------------------------------------------------------


def tool_reply(tool: str, arguments: str, call_id: str = "call_1") -> list[dict[str, Any]]:
    return [
        {"type": "tool-call", "call_id": call_id, "tool": tool, "input": arguments},
        {"type": "finish-step", "finish_reason": "tool-calls", "usage": {"input": 5, "output": 3}},
    ]


def text_reply(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": text},
        {"type": "text-end", "id": "t"},
        {"type": "finish-step", "finish_reason": "stop", "usage": {"input": 10, "output": 2}},
    ]


async def test_a_scripted_turn_calls_memory_search_and_logs_its_output(
    session, agents, memories, settings, tmp_path
):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps([tool_reply("memory_search", '{"query": "rocket deploy"}'), text_reply("ok")])
    )
    settings.FORGE_MODEL = "offline/script"
    settings.FORGE_SCRIPT = str(script)
    item = await database_sync_to_async(slice_of)(memories["mine"])

    started = await start_turn(session=session, text="what did we deploy?")
    await asyncio.wait_for(started.task, timeout=30)

    from tests.runtime.conftest import ahistory

    reply = next(m for m in reversed(await ahistory(session)) if m["info"]["role"] == "assistant")
    part = next(p for p in reply["parts"] if p["type"] == "tool")
    assert part["tool"] == "memory_search"
    assert part["state"]["status"] == "completed", part["state"]
    assert part["state"]["input"] == {"query": "rocket deploy"}
    output = part["state"]["output"]
    assert f"slice {item.pk}" in output
    assert "We deployed the rocket service" in output
    assert "Carol" not in output
    assert "Another tenant" not in output
    assert part["state"]["metadata"]["slice_ids"] == [item.pk]
    assert part["state"]["metadata"]["count"] == 1
    assert reply["parts"][-2]["text"] == "ok"


# --- a search waiting on the embedder ----------------------------------------------------

_entered = threading.Event()
_gate = threading.Event()


class GatedEmbedder(Embedder):
    """The offline model, behind a gate: a query waits until the test opens it (a slow
    embedding server, as the QA round's trickling one)."""

    def __init__(self) -> None:
        self.inner = OfflineEmbedder.shared()
        self.name = self.inner.name
        self.dim = self.inner.dim

    def embed_batch(self, texts: list[str]) -> Any:
        _entered.set()
        _gate.wait(30)
        return self.inner.embed_batch(texts)


def gated_embedder() -> Embedder:
    return GatedEmbedder()


async def test_a_search_waiting_on_the_embedder_leaves_the_database_thread_free(
    ctx, memories, settings
):
    """QA (HIGH): ``memory_search`` ran on the runtime's one database thread, and asked
    the embedding server for the query's vector there: a slow server held up every
    turn's writes in the process and the leases' renewals (turns lost their leases).
    The search waits beside that thread; the runtime's work goes on meanwhile."""
    from forge.db.worker import db
    from memory.embeddings import reset_embedder

    settings.FORGE_MEMORY_EMBEDDER = f"{__name__}.gated_embedder"
    reset_embedder()
    _entered.clear()
    _gate.clear()
    try:
        searching = asyncio.create_task(call("memory_search", {"query": "rocket"}, ctx))
        assert await asyncio.to_thread(_entered.wait, 30)
        assert await asyncio.wait_for(db(lambda: "free")(), timeout=10) == "free"
        assert not searching.done()
        _gate.set()
        result = await asyncio.wait_for(searching, timeout=30)
        assert "We deployed the rocket service" in result.output
    finally:
        _gate.set()
        settings.FORGE_MEMORY_EMBEDDER = ""
        reset_embedder()
