"""Property: whatever the model is sent comes from the log, and the log replays it.

Random scripted sessions (turns with and without tool calls, automatic
compaction from a small window, manual compactions of which some fail, pruning,
kept tails, context blocks). For every provider request:

* every string in it can be found in the log at or before that request's
  step-start (or is one of the fixed forms the derivation writes: the compaction
  prompt, a pruned output's placeholder, a tool call's arguments as JSON);
* replaying the exported log (imported again) at that step-start's seq
  reproduces the request exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from forge import providers, runtime
from forge.context import COMPACTION_PROMPT, request_for
from forge.context.blocks import set_block
from forge.errors import CompactionFailed, NothingToCompact
from forge.providers import events as ev
from forge.tools import Tool, ToolResult, temporary_tools
from sessions import selectors, services
from sessions.models import Session, SessionEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
PLACEHOLDER = re.compile(r"\[the output of the (\S+) call was pruned .* part_id (\S+) shows it\]")
requests: list[dict[str, Any]] = []


class Recorder:
    """Records each request; calls ``bigout`` when the prompt asks for it, else talks."""

    name = "rec"

    async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
        requests.append(request.as_dict())
        yield ev.StartStep()
        last = request.messages[-1] if request.messages else {}
        if last.get("role") == "user" and "USE_TOOL" in str(last.get("content")):
            n = len(requests)
            yield ev.ToolCall(call_id=f"call_{n}", tool="bigout", input=json.dumps({"n": n}))
            yield ev.FinishStep("tool-calls", ev.Usage(input=10, output=3))
            return
        words = str(last.get("content", "")).split()[:12] or ["ok"]
        text = "reply " + " ".join(words)
        yield ev.TextStart("t")
        yield ev.TextDelta("t", text)
        yield ev.TextEnd("t")
        yield ev.FinishStep("stop", ev.Usage(input=10, output=len(words)))


class FailingSummary:
    name = "failsum"

    async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
        yield ev.StartStep()
        yield ev.Error(name="APIError", message="the summarizer is down")


def bigout(ctx: Any, args: dict[str, Any]) -> ToolResult:
    return ToolResult(output=f"OUT{args['n']} " + " ".join(WORDS) * 8)


BIGOUT = Tool(
    name="bigout",
    description="Returns a long output.",
    parameters={
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    },
    function=bigout,
)

turns = st.tuples(
    st.just("turn"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=25), st.booleans()
)
actions = st.lists(
    st.one_of(
        turns,
        turns,
        turns,
        st.tuples(st.just("compact"), st.booleans()),
        st.tuples(st.just("block"), st.sampled_from(["a", "b"]), st.sampled_from(WORDS)),
    ),
    min_size=2,
    max_size=12,
)


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


# The request's own structure (roles, the tool-call type), not content.
STRUCTURE = {"system", "user", "assistant", "tool", "function"}


def from_log(text: str, logged: list[str], inputs: list[Any], part_ids: set[str]) -> bool:
    if not text or text in STRUCTURE or text == COMPACTION_PROMPT:
        return True
    if any(text in s for s in logged):
        return True
    placeholder = PLACEHOLDER.fullmatch(text)
    if placeholder:
        return placeholder.group(2) in part_ids
    try:
        return json.loads(text) in inputs
    except ValueError:
        return False


@pytest.fixture
def scripted() -> Iterator[None]:
    providers.register("rec", lambda model: Recorder())
    providers.register("failsum", lambda model: FailingSummary())
    with (
        override_settings(
            FORGE_MODEL="rec/x",
            FORGE_SMALL_MODEL="offline/echo",
            FORGE_OUTPUT_RESERVE=50,
            FORGE_PRUNE_MINIMUM_TOKENS=1,
        ),
        temporary_tools(BIGOUT),
    ):
        yield


@given(
    script=actions,
    window=st.sampled_from([400, 900, 100_000]),
    tail=st.sampled_from([0, 60, 400]),
    protect=st.sampled_from([0, 20, 100_000]),
)
@hsettings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_request_comes_from_the_log_and_replays_exactly(
    user, agents, scripted, script, window, tail, protect
):
    requests.clear()
    with override_settings(
        FORGE_CONTEXT_LIMIT_DEFAULT=window,
        FORGE_COMPACT_TAIL_TOKENS=tail,
        FORGE_PRUNE_PROTECT_TOKENS=protect,
    ):
        session = services.create_session(user=user)
        log = run_script(session, script)
    check(user, session, log)


def run_script(session: Any, script: list[Any]) -> list[dict[str, Any]]:
    for action in script:
        if action[0] == "turn":
            text = " ".join(action[1]) + (" USE_TOOL" if action[2] else "")
            runtime.prompt(session=session, text=text, wait=True)
        elif action[0] == "block":
            set_block(session, kind="notes", key=action[1], body={"text": f"note {action[2]}"})
        else:
            before = list(selectors.iter_log(session=session))
            small = "failsum/x" if action[1] else "offline/echo"
            try:
                with override_settings(FORGE_SMALL_MODEL=small):
                    runtime.compact(session=session, wait=True)
            except (NothingToCompact, CompactionFailed):
                assert list(selectors.iter_log(session=session)) == before
    return list(selectors.iter_log(session=session))


def check(user: Any, session: Any, log: list[dict[str, Any]]) -> None:
    compactions = [e["data"]["auto"] for e in log if e["type"] == "session.compacted"]
    event(f"compactions: auto {compactions.count(True)}, manual {compactions.count(False)}")
    pruned = any(
        e["type"] == "part.updated"
        and (e["data"].get("state") or {}).get("time", {}).get("compacted")
        for e in log
    )
    event(f"pruned: {pruned}")
    starts = [
        e["seq"]
        for e in log
        if e["type"] == "part.updated"
        and e["data"]["type"] == "step-start"
        and not any(
            o["seq"] < e["seq"]
            and o["type"] == "part.updated"
            and o["data"]["id"] == e["data"]["id"]
            for o in log
        )
    ]
    assert len(starts) == len(requests)

    for seq, request in zip(starts, requests, strict=True):
        upto = [e for e in log if e["seq"] <= seq]
        logged = list(strings([e["data"] for e in upto]))
        inputs = [
            e["data"]["state"].get("input")
            for e in upto
            if e["type"] == "part.updated" and e["data"]["type"] == "tool"
        ]
        part_ids = {e["data"]["id"] for e in upto if e["type"] == "part.updated"}
        for text in strings(request):
            assert from_log(text, logged, inputs, part_ids), (seq, text)

    # replay the exported log, imported again, at every step-start
    exported = list(selectors.export_lines(session=session))
    services.delete_session(session=session)
    imported = services.import_log(user=user, events=services.parse_log(exported))
    imported = Session.objects.select_related("tenant").get(pk=imported.pk)
    for seq, request in zip(starts, requests, strict=True):
        model, replayed = request_for(imported, at=seq)
        assert model == "rec/x"
        assert replayed.as_dict() == request, seq
    assert SessionEvent.objects.filter(session=imported).count() == len(log)
