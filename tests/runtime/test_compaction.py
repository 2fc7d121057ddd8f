"""Compaction: overflow detection, automatic and manual compaction, and their guards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core.management import CommandError, call_command

from forge import providers, runtime
from forge.context import request_for
from forge.errors import CompactionFailed, NothingToCompact, SessionBusy
from forge.models import Agent
from forge.providers import events as ev
from forge.runtime import lease, start_turn
from forge.runtime.compaction import extractive_summary
from forge.runtime.small_model import fit_lines
from sessions import selectors
from sessions.models import SessionEvent

from .conftest import ahistory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike"


@pytest.fixture
def small_window(settings: Any) -> Any:
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_SMALL_MODEL = "offline/echo"
    settings.FORGE_CONTEXT_LIMIT_DEFAULT = 600
    settings.FORGE_OUTPUT_RESERVE = 50
    settings.FORGE_COMPACT_TAIL_TOKENS = 80
    settings.FORGE_AUTO_COMPACT = True
    return settings


async def run(session: Any, text: str) -> Any:
    started = await start_turn(session=session, text=text)
    await asyncio.wait_for(started.task, timeout=30)
    return started


def markers(session: Any) -> list[dict[str, Any]]:
    return list(
        SessionEvent.objects.filter(session=session, type="session.compacted")
        .order_by("seq")
        .values_list("data", flat=True)
    )


def reply_of(items: list[dict[str, Any]], message_id: str) -> dict[str, Any]:
    return next(item for item in items if item["info"]["id"] == message_id)


def contents(session: Any) -> list[str]:
    return [str(m.get("content")) for m in request_for(session)[1].messages]


async def test_auto_compaction_summarizes_and_the_turn_continues(session, agents, small_window):
    first = await run(session, f"turn zero {WORDS}")
    for n in range(1, 8):
        last = await run(session, f"turn {n} {WORDS} {WORDS}")
    found = await database_sync_to_async(markers)(session)
    assert found, "the window overflowed: a compaction was logged"
    items = await ahistory(session)
    # every turn is still in the store, and every reply finished without error
    assert sum(1 for i in items if i["info"]["role"] == "user") == 8 + len(found)
    done = reply_of(items, last.assistant_message_id)["info"]
    assert done["error"] is None
    assert done["completed_at"]
    summary = reply_of(items, found[-1]["message_id"])
    assert summary["info"]["summary"] is True
    assert summary["parts"][0]["text"].startswith("## Goal")
    compaction = reply_of(items, found[-1]["parent_id"])["parts"][0]
    assert compaction["type"] == "compaction"
    assert compaction["auto"] is True
    assert compaction["overflow"] is True
    seen = await database_sync_to_async(contents)(session)
    assert not any(text.startswith("turn zero") for text in seen)
    assert any("## Goal" in text for text in seen)
    assert first.message["info"]["id"] < found[-1]["parent_id"]


@pytest.mark.parametrize("where", ["setting", "agent"])
async def test_auto_false_ends_the_reply_with_a_context_overflow_error(
    session, agents, small_window, where
):
    if where == "setting":
        small_window.FORGE_AUTO_COMPACT = False
    else:
        await database_sync_to_async(Agent.objects.filter(name="build").update)(auto_compact=False)
    started: Any = None
    items: list[dict[str, Any]] = []
    for n in range(8):
        started = await run(session, f"turn {n} {WORDS} {WORDS}")
        items = await ahistory(session)
        if reply_of(items, started.assistant_message_id)["info"]["error"]:
            break
    error = reply_of(items, started.assistant_message_id)["info"]["error"]
    assert error["name"] == "ContextOverflowError"
    assert "automatic compaction is off" in error["message"]
    assert await database_sync_to_async(markers)(session) == []


async def test_an_agent_context_limit_overrides_the_setting(session, agents, small_window):
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    small_window.FORGE_AUTO_COMPACT = False
    await database_sync_to_async(Agent.objects.filter(name="build").update)(context_limit=1024)
    started = await run(session, " ".join([WORDS] * 80))
    items = await ahistory(session)
    error = reply_of(items, started.assistant_message_id)["info"]["error"]
    assert error["name"] == "ContextOverflowError"


def _overflow_provider(calls: list[int], *, fail_times: int) -> Any:
    class Overflowing:
        name = "overflowing"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            calls.append(len(request.messages))
            yield ev.StartStep()
            if len(calls) <= fail_times:
                yield ev.Error(
                    name="APIError",
                    message="This model's maximum context length is 10 tokens "
                    "(context_length_exceeded)",
                    status=400,
                )
                return
            yield ev.TextStart("t")
            yield ev.TextDelta("t", "fine")
            yield ev.TextEnd("t")
            yield ev.FinishStep("stop", ev.Usage(input=1, output=1))

    return lambda model: Overflowing()


@pytest.mark.parametrize("auto", [True, False])
async def test_a_provider_overflow_error(session, agents, small_window, auto):
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    small_window.FORGE_AUTO_COMPACT = auto
    for n in range(3):
        await run(session, f"turn {n} {WORDS}")
    calls: list[int] = []
    providers.register("overflowing", _overflow_provider(calls, fail_times=1))
    small_window.FORGE_MODEL = "overflowing/x"
    started = await run(session, "one more")
    items = await ahistory(session)
    info = reply_of(items, started.assistant_message_id)["info"]
    found = await database_sync_to_async(markers)(session)
    kinds = [
        p["type"]
        for p in reply_of(items, started.assistant_message_id)["parts"]
        if p["type"].startswith("step-")
    ]
    if auto:
        assert info["error"] is None
        assert len(found) == 1
        assert len(calls) == 2
        assert calls[1] < calls[0]
        # The failed attempt left no step-start of its own beside the retry's (QA).
        assert kinds == ["step-start", "step-finish"]
    else:
        assert kinds == []  # the step produced nothing before its error
        assert info["error"]["name"] == "ContextOverflowError"
        assert "context_length_exceeded" in info["error"]["message"]
        assert found == []
        assert len(calls) == 1


async def test_a_provider_overflow_after_compacting_is_not_compacted_again(
    session, agents, small_window
):
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    for n in range(3):
        await run(session, f"turn {n} {WORDS}")
    calls: list[int] = []
    providers.register("overflowing", _overflow_provider(calls, fail_times=5))
    small_window.FORGE_MODEL = "overflowing/x"
    started = await run(session, "one more")
    items = await ahistory(session)
    assert reply_of(items, started.assistant_message_id)["info"]["error"]["name"] == (
        "ContextOverflowError"
    )
    assert len(await database_sync_to_async(markers)(session)) == 1
    assert len(calls) == 2


# --- manual ---------------------------------------------------------------------------


def _compact(session: Any) -> Any:
    return runtime.compact(session=session, wait=True)


async def test_manual_compaction_and_no_second_one_without_progress(session, agents, small_window):
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    for n in range(4):
        await run(session, f"turn {n} {WORDS}")
    marker = await database_sync_to_async(_compact)(session)
    assert marker["auto"] is False
    head = await database_sync_to_async(selectors.head_seq)(
        tenant=session.tenant, session_id=session.pk
    )
    with pytest.raises(NothingToCompact, match="nothing happened since"):
        await database_sync_to_async(_compact)(session)
    assert (
        await database_sync_to_async(selectors.head_seq)(
            tenant=session.tenant, session_id=session.pk
        )
        == head
    )
    # progress: a new turn; then compacting again is allowed
    await run(session, f"turn 9 {WORDS}")
    await database_sync_to_async(_compact)(session)
    assert len(await database_sync_to_async(markers)(session)) == 2
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None


async def test_compacting_an_empty_or_busy_session_is_refused(session, agents, small_window):
    with pytest.raises(NothingToCompact, match="empty"):
        await database_sync_to_async(_compact)(session)
    await run(session, f"turn {WORDS}")
    await database_sync_to_async(lease.acquire)(session=session, message_id="msg_x")
    with pytest.raises(SessionBusy):
        await database_sync_to_async(_compact)(session)
    await database_sync_to_async(lease.release)(session_id=session.pk)
    assert await database_sync_to_async(markers)(session) == []


@pytest.mark.parametrize("reply", ["error", "nothing", "length", "content-filter"])
async def test_a_failing_summary_model_writes_nothing(session, agents, small_window, reply):
    """A summary cut short (``length``, ``content-filter``) fails as an error does: it
    would take the place of what it summarizes (QA: "## Goal\nThe user" did)."""
    for n in range(3):
        await run(session, f"turn {n} {WORDS}")

    class Summarizer:
        name = "summarizer"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            yield ev.StartStep()
            if reply == "error":
                yield ev.Error(name="APIError", message="the summarizer is down")
                return
            if reply != "nothing":
                yield ev.TextStart(id="t")
                yield ev.TextDelta(id="t", delta="## Goal\nThe user")
                yield ev.TextEnd(id="t")
            yield ev.FinishStep("stop" if reply == "nothing" else reply, ev.Usage())

    providers.register("summarizer", lambda model: Summarizer())
    small_window.FORGE_SMALL_MODEL = "summarizer/x"
    before = await database_sync_to_async(lambda: list(selectors.iter_log(session=session)))()
    with pytest.raises(CompactionFailed):
        await database_sync_to_async(_compact)(session)
    after = await database_sync_to_async(lambda: list(selectors.iter_log(session=session)))()
    assert after == before
    assert await database_sync_to_async(lease.current)(session_id=session.pk) is None


async def test_the_compact_session_command(session, agents, small_window, capsys):
    def command(*args: str) -> None:
        call_command("compact_session", *args)

    with pytest.raises(CommandError, match="nothing_to_compact"):
        await database_sync_to_async(command)(session.pk)
    with pytest.raises(CommandError, match="no session"):
        await database_sync_to_async(command)("ses_nope")
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    for n in range(3):
        await run(session, f"turn {n} {WORDS}")
    await database_sync_to_async(command)(session.pk)
    assert "compacted" in capsys.readouterr().out


def test_the_extractive_summary_follows_the_template():
    items: list[dict[str, Any]] = [
        {
            "info": {"id": "m1", "role": "user"},
            "parts": [{"type": "text", "text": "Fix the parser. Never touch main.py."}],
        },
        {
            "info": {"id": "m2", "role": "assistant"},
            "parts": [
                {"type": "text", "text": "Reading it."},
                {
                    "type": "tool",
                    "call_id": "c",
                    "tool": "read_file",
                    "state": {"status": "completed", "input": {"path": "p.py"}, "output": "x"},
                },
            ],
        },
    ]
    summary = extractive_summary(items)
    for title in ("Goal", "Constraints", "Progress", "Decisions", "Next steps", "Relevant files"):
        assert f"## {title}" in summary
    assert "Never touch main.py." in summary
    assert "- p.py" in summary


# --- the summary model's window (QA, 2026-12-07) ----------------------------------------


def _windowed_summarizer(sizes: list[int], *, window_chars: int) -> Any:
    """A summary model that refuses, as OpenAI does (400 ``context_length_exceeded``),
    any request over ``window_chars`` characters: its real window, smaller than the one
    configured for it."""

    class Windowed:
        name = "windowed"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            size = sum(len(s) for s in request.system) + len(request.messages[0]["content"])
            sizes.append(size)
            yield ev.StartStep()
            if size > window_chars:
                yield ev.Error(
                    name="APIError",
                    message="This model's maximum context length is exceeded. Please reduce "
                    "the length of the messages. (context_length_exceeded)",
                    status=400,
                )
                return
            yield ev.TextStart(id="t")
            yield ev.TextDelta(id="t", delta="## Goal\nsummarized")
            yield ev.TextEnd(id="t")
            yield ev.FinishStep("stop", ev.Usage(input=size // 4, output=5))

    return lambda model: Windowed()


async def test_a_summary_model_with_a_smaller_window_still_compacts(session, agents, small_window):
    """Before, each message was cut to 2,000 characters but the transcript as a whole was
    not: once it outgrew the summary model's window every compaction failed, and with it
    every later turn of the session, for good (QA). Now the transcript is fitted to the
    configured window, then halved while the model still says it is over."""
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    for n in range(12):
        await run(session, f"turn {n} " + " ".join([WORDS] * 8))
    sizes: list[int] = []
    providers.register("windowed", _windowed_summarizer(sizes, window_chars=3_000))
    small_window.FORGE_SMALL_MODEL = "windowed/x"
    marker = await database_sync_to_async(_compact)(session)
    assert marker["auto"] is False
    assert len(sizes) > 1
    assert sizes[0] > 3_000 >= sizes[-1]  # refused, then cut to fit
    assert sizes == sorted(sizes, reverse=True)
    # The window as configured is taken at once: no refusal to learn it from.
    await run(session, "and one more turn " + " ".join([WORDS] * 8))
    sizes.clear()
    small_window.FORGE_CONTEXT_LIMITS = {"windowed/x": 700}
    small_window.FORGE_OUTPUT_RESERVE = 0
    await database_sync_to_async(_compact)(session)
    assert len(sizes) == 1
    assert sizes[0] <= 2_800


def test_a_transcript_keeps_its_first_line_and_its_newest_lines():
    lines = ["user: the goal " + "g" * 3_000] + [f"user: turn {n} " + "x" * 100 for n in range(100)]
    fitted = fit_lines(lines, 4_000)
    assert len(fitted) <= 4_000
    kept = fitted.split("\n")
    assert kept[0].startswith("user: the goal")
    assert kept[0].endswith(" …")
    assert kept[-1] == lines[-1]
    left_out = int(kept[1].split()[1])
    assert left_out == 100 - (len(kept) - 2)  # the marker counts what is not there
    assert fit_lines(lines[:3], 4_000) == "\n".join(lines[:3])  # fits: whole


@pytest.mark.parametrize(
    ("error", "overflowed"),
    [
        (
            ev.Error("APIError", "maximum context length (context_length_exceeded)", status=400),
            True,
        ),
        (ev.Error("ProviderError", "prompt is too long: 210000 tokens"), True),
        (ev.Error("ContextOverflowError", "over the limit"), True),
        (ev.Error("APIError", "Too many tokens per minute", retryable=True, status=429), False),
        (ev.Error("APIError", "context window cache is full", retryable=True, status=503), False),
        (ev.Error("APIError", "the upstream context length check crashed", status=500), False),
    ],
)
def test_which_errors_say_the_request_overflowed(error, overflowed):
    """A rate limit naming tokens is no overflow: compacting cured nothing, and the turn
    ran its retries twice (QA)."""
    assert error.overflowed is overflowed


async def test_a_rate_limit_naming_tokens_ends_the_reply_without_compacting(
    session, agents, small_window
):
    small_window.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    for n in range(3):
        await run(session, f"turn {n} {WORDS}")
    calls: list[int] = []

    class RateLimited:
        name = "ratelimited"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            calls.append(1)
            yield ev.StartStep()
            yield ev.Error("APIError", "Rate limit reached: too many tokens per minute", True, 429)

    providers.register("ratelimited", lambda model: RateLimited())
    small_window.FORGE_MODEL = "ratelimited/x"
    started = await run(session, "one more")
    items = await ahistory(session)
    error = reply_of(items, started.assistant_message_id)["info"]["error"]
    assert (error["name"], error["retryable"]) == ("APIError", True)
    assert await database_sync_to_async(markers)(session) == []
    assert len(calls) == 1


def test_memorys_summary_of_a_dialogue_over_the_window_covers_every_message(settings):
    """Fitted by leaving its middle out, as a compaction's transcript is, a rolled
    dialogue's middle turns were in no summary, while the trim hid them from the model
    (QA, MEDIUM). Memory's summary is made in pieces instead, each within the window
    (and split again when the model refuses one), their summaries in order."""
    import re

    from forge.runtime.small_model import summarize_dialogue

    sizes: list[int] = []

    class Tagging:
        """Refuses over 3,000 characters; answers with the tags it was shown."""

        name = "tagging"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            content = request.messages[0]["content"]
            sizes.append(len(content))
            yield ev.StartStep()
            if len(content) > 3_000:
                yield ev.Error(
                    "APIError", "maximum context length (context_length_exceeded)", status=400
                )
                return
            yield ev.TextStart(id="t")
            yield ev.TextDelta(id="t", delta=" ".join(re.findall(r"T\d\d", content)))
            yield ev.TextEnd(id="t")
            yield ev.FinishStep("stop", ev.Usage(input=1, output=1))

    providers.register("tagging", lambda model: Tagging())
    settings.FORGE_SMALL_MODEL = "tagging/x"
    settings.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000  # the window as configured: too large
    messages = [
        {"role": "user" if n % 2 == 0 else "assistant", "text": f"T{n:02d} " + "words " * 60}
        for n in range(40)
    ]
    summary = summarize_dialogue(messages)
    assert summary.split() == [f"T{n:02d}" for n in range(40)]  # all of them, in order
    assert sizes[0] > 3_000  # refused, then asked in pieces (split again while refused)
    assert len([size for size in sizes if size <= 3_000]) > 1


def test_pieces_keep_every_line_in_order_within_the_budget():
    from forge.runtime.small_model import FIT_FLOOR, pieces

    lines = [f"line {n} " + "x" * (50 * (n % 7)) for n in range(300)]
    groups = pieces(lines, 4_000)
    assert [line.split()[1] for group in groups for line in group] == [str(n) for n in range(300)]
    assert all(len("\n".join(group)) <= 4_000 for group in groups)
    huge = ["user: " + "y" * 100_000] * 3
    assert all(len("\n".join(g)) <= FIT_FLOOR * 2 for g in pieces(huge, FIT_FLOOR * 2))


def test_the_pieces_summaries_all_fit_what_a_slice_stores(settings):
    """Joined whole, long piece summaries went past what a slice stores (20,000
    characters), and the store cut the newest pieces' off (QA). Each piece's summary
    gets its share."""
    import re

    from forge.runtime.small_model import summarize_dialogue
    from memory.normalize import SUMMARY_MAX

    class Verbose:
        name = "verbose"

        async def stream(self, request: Any) -> AsyncIterator[ev.StreamEvent]:
            content = request.messages[0]["content"]
            yield ev.StartStep()
            if len(content) > 3_000:
                yield ev.Error("APIError", "(context_length_exceeded)", status=400)
                return
            tags = " ".join(re.findall(r"T\d{3}", content))
            yield ev.TextStart(id="t")
            yield ev.TextDelta(id="t", delta=f"{tags} " + "details " * 400)
            yield ev.TextEnd(id="t")
            yield ev.FinishStep("stop", ev.Usage(input=1, output=1))

    providers.register("verbose", lambda model: Verbose())
    settings.FORGE_SMALL_MODEL = "verbose/x"
    settings.FORGE_CONTEXT_LIMIT_DEFAULT = 1_000_000
    messages = [{"role": "user", "text": f"T{n:03d} " + "words " * 30} for n in range(120)]
    summary = summarize_dialogue(messages)
    assert len(summary) <= SUMMARY_MAX
    assert "T119" in summary  # the newest piece's summary is there
