"""Traces of real turns (the SDK's in-memory exporter): GenAI attributes on the model and
tool calls, and one trace per reply across an approval and across a takeover."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from forge.runtime import answer, settle
from forge.runtime.recovery import finalize_dead_turn
from forge.telemetry import tracing
from tests.runtime.test_approvals_flow import WRITE, _finished, _suspended
from tests.runtime.test_turns import run, text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def by_trace(exporter, message_id):
    trace_id, _ = tracing.turn_ids(message_id)
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]


async def test_a_tool_turn_is_one_trace_with_genai_attributes(session, agents, script, spans):
    agents["build"].tools = ["read_file"]
    await database_sync_to_async(agents["build"].save)()
    script(
        [
            tool_reply("read_file", '{"path": "none.txt"}'),
            text_reply("done", usage={"input": 9, "output": 1}),
        ]
    )
    started = await run(session, "read")
    found = by_trace(spans, started.assistant_message_id)
    names = sorted(s.name for s in found)
    assert names == [
        "chat script",
        "chat script",
        "execute_tool read_file",
        "invoke_agent build",
        "step 1",
        "step 2",
    ]
    (turn,) = [s for s in found if s.name == "invoke_agent build"]
    assert turn.parent is None
    assert turn.attributes["gen_ai.conversation.id"] == session.pk
    chats = [s for s in found if s.name == "chat script"]
    assert {s.attributes["gen_ai.provider.name"] for s in chats} == {"offline"}
    assert sorted(tuple(s.attributes["gen_ai.response.finish_reasons"]) for s in chats) == [
        ("stop",),
        ("tool-calls",),
    ]
    assert {s.attributes["gen_ai.usage.input_tokens"] for s in chats} == {5, 9}
    assert all("gen_ai.input.messages" not in s.attributes for s in chats)  # content off
    (tool,) = [s for s in found if s.name.startswith("execute_tool")]
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["error.type"] == "ToolError"  # no such file
    # The tool's error names what the model asked for (a path): content, kept out of
    # the span while content capture is off (QA).
    assert tool.status.description is None
    assert not tool.events  # nor the exception's event, which repeats it
    assert {s.context.trace_id for s in found} == {turn.context.trace_id}


async def test_an_approved_turn_goes_on_in_the_same_trace(
    session, agents, settings, script, user, spans
):
    reply = await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("written")]
    )
    await answer(session=session, user=user, call_id="call_1", approve=True, reason="ok")
    await _finished(session)
    # The resumed turn's span ends with its task, a moment after the completion is
    # written: on a loaded CI pass it was read before (stop 45's server-b pass).
    await settle()
    found = by_trace(spans, reply["info"]["id"])
    turns = [s for s in found if s.name == "invoke_agent build"]
    assert len(turns) == 2  # the first pass, then the one the answer resumed
    root = next(s for s in turns if s.parent is None)
    resumed = next(s for s in turns if s.parent is not None)
    assert resumed.parent.span_id == root.context.span_id
    assert resumed.attributes["forge.resumed"] is True
    assert any(s.name == "execute_tool write_file" for s in found)


def test_a_turn_finalized_after_a_takeover_ends_in_its_trace(session, spans):
    """What a killed process leaves: an open reply. The process that takes the lease over
    finalizes it in the reply's trace: a child of the root span the dead process
    started (whose ids every process derives from the message id, as the live turn's
    root above shows)."""
    from sessions import services

    asked = services.update_message(session=session, info={"role": "user"}).data["id"]
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": asked, "agent": "build"}
    ).data["id"]
    assert finalize_dead_turn(session) == [reply]
    (recovered,) = spans.get_finished_spans()
    trace_id, root_id = tracing.turn_ids(reply)
    assert recovered.context.trace_id == trace_id
    assert recovered.parent.span_id == root_id
    assert recovered.attributes["forge.resumed"] is True
    assert recovered.attributes["error.type"] == "Interrupted"


async def test_content_capture_records_the_prompt_and_the_completion(session, agents, settings):
    settings.FORGE_MODEL = "offline/echo"
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter), capture_content=True)
    try:
        await run(session, "echo me back")
    finally:
        tracing.uninstall()
    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    attributes = dict(chat.attributes or {})
    assert "echo me back" in str(attributes["gen_ai.input.messages"])
    assert attributes["gen_ai.output.messages"] == "echo me back"


async def test_a_collector_that_is_down_does_not_fail_the_turn(session, agents, settings):
    """The real exporter behind the real batch processor, aimed at a port nothing
    listens on: the turn finishes as ever; export fails on the SDK's own thread."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from sessions import selectors

    settings.FORGE_MODEL = "offline/echo"
    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/v1/traces", timeout=1)
    tracing.install(
        BatchSpanProcessor(
            exporter, max_queue_size=4, max_export_batch_size=4, schedule_delay_millis=50
        )
    )
    try:
        for i in range(3):
            await run(session, f"still here {i}")
    finally:
        tracing.uninstall()
    history = await database_sync_to_async(
        lambda: list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))
    )()
    replies = [item for item in history if item["info"]["role"] == "assistant"]
    assert len(replies) == 3
    assert all(r["info"]["completed_at"] and not r["info"]["error"] for r in replies)


async def test_a_failed_turn_marks_its_turn_span_and_leaves_usage_unknown(
    session, agents, script, spans
):
    """A fourth-round finding: only the model call's span said the turn failed, with a
    usage of 0 tokens for a call whose usage is unknown; and the turn's span named the
    model with its provider, the call's without."""
    script([[{"type": "error", "name": "ProviderError", "message": "HTTP 503 from the model"}]])
    started = await run(session, "fail")
    found = by_trace(spans, started.assistant_message_id)
    (turn,) = [s for s in found if s.name == "invoke_agent build"]
    assert turn.status.status_code.name == "ERROR"
    assert turn.attributes["error.type"] == "ProviderError"
    (chat,) = [s for s in found if s.name == "chat script"]
    assert "gen_ai.usage.input_tokens" not in chat.attributes
    assert turn.attributes["gen_ai.request.model"] == chat.attributes["gen_ai.request.model"]
    assert turn.attributes["gen_ai.provider.name"] == "offline"


async def test_a_subtasks_trace_is_linked_to_its_parents_tool_span(
    session, agents, settings, spans
):
    """QA (LOW): a subtask's ``invoke_agent`` span had its own trace and nothing joining
    it to the parent's ``execute_tool task`` span."""
    settings.FORGE_MODEL = "offline/echo"
    started = await run(
        session,
        '/tool task {"agent": "explore", "prompt": "what is here", "description": "look"}',
    )
    parent = by_trace(spans, started.assistant_message_id)
    (tool,) = [s for s in parent if s.name == "execute_tool task"]
    (child,) = [s for s in spans.get_finished_spans() if s.name == "invoke_agent explore"]
    assert child.context.trace_id != tool.context.trace_id  # the child reply's own trace
    assert [link.context.span_id for link in child.links] == [tool.context.span_id]
    assert [link.context.trace_id for link in child.links] == [tool.context.trace_id]


async def test_an_aborted_turns_span_says_so(session, agents, script, spans):
    """QA (LOW): an aborted reply's ``invoke_agent`` span looked like a finished one."""
    import asyncio

    from forge.runtime import abort_turn, start_turn
    from tests.runtime.test_abort_and_recovery import slow_text, streamed_parts, wait_until

    script([slow_text(200, 0.02)])
    started = await start_turn(session=session, text="talk slowly")
    await wait_until(lambda: streamed_parts(session, "text"))
    await abort_turn(session=session)
    await asyncio.wait({started.task}, timeout=10)
    (turn,) = [
        s for s in by_trace(spans, started.assistant_message_id) if s.name == "invoke_agent build"
    ]
    assert turn.attributes["forge.aborted"] is True
    assert turn.attributes["forge.abort_reason"] == "user"
    assert turn.status.status_code.name != "ERROR"
