"""The tracing helpers: a turn's spans share one trace in every process, GenAI attributes,
content only when asked, and nothing at all when tracing is off."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from forge.telemetry import tracing


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.uninstall()


def _turn(message_id, *, resumed):
    return tracing.turn_span(
        session_id="ses_1",
        message_id=message_id,
        agent="build",
        model="offline/echo",
        resumed=resumed,
    )


def test_a_turn_resumed_elsewhere_is_in_the_same_trace(spans):
    with (
        _turn("msg_a", resumed=False),
        tracing.span("step 1"),
        tracing.model_call(provider="offline", model="echo") as call,
    ):
        tracing.model_result(call, input_tokens=12, output_tokens=3, finish_reason="tool-calls")
    # ... the process dies; another takes the lease over and goes on
    with (
        _turn("msg_a", resumed=True),
        tracing.tool_call(tool="read_file", call_id="call_1") as tool,
    ):
        tracing.failed(tool, "ToolError", "no such file")
    finished = {s.name: s for s in spans.get_finished_spans()}
    (root,) = [s for s in spans.get_finished_spans() if s.parent is None]
    assert root.name == "invoke_agent build"
    trace_id, root_id = tracing.turn_ids("msg_a")
    assert (root.context.trace_id, root.context.span_id, root.parent) == (trace_id, root_id, None)
    assert {s.context.trace_id for s in finished.values()} == {trace_id}
    resumed = [s for s in spans.get_finished_spans() if s.attributes.get("forge.resumed")]
    assert len(resumed) == 1
    assert resumed[0].parent.span_id == root_id
    chat = finished["chat echo"]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "offline"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 12
    assert tuple(chat.attributes["gen_ai.response.finish_reasons"]) == ("tool-calls",)
    assert "gen_ai.input.messages" not in chat.attributes
    assert chat.parent.span_id == finished["step 1"].context.span_id
    tool_span = finished["execute_tool read_file"]
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool_span.attributes["error.type"] == "ToolError"
    # another reply: another trace
    with _turn("msg_b", resumed=False):
        pass
    assert spans.get_finished_spans()[-1].context.trace_id == tracing.turn_ids("msg_b")[0]


def test_content_is_recorded_only_when_asked():
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter), capture_content=True)
    try:
        with tracing.model_call(
            provider="p", model="m", messages=[{"role": "user", "content": "hi"}]
        ) as call:
            tracing.model_result(
                call, input_tokens=1, output_tokens=1, finish_reason="stop", output="hello"
            )
    finally:
        tracing.uninstall()
    (chat,) = exporter.get_finished_spans()
    attributes = dict(chat.attributes or {})
    assert '"content": "hi"' in str(attributes["gen_ai.input.messages"])
    assert attributes["gen_ai.output.messages"] == "hello"


def test_off_means_no_spans_and_no_errors():
    assert not tracing.enabled()
    with _turn("msg_c", resumed=False) as turn, tracing.model_call(provider="p", model="m") as call:
        tracing.model_result(call, input_tokens=1, output_tokens=1, finish_reason="stop")
        tracing.failed(turn, "X")
    assert turn is None
    assert call is None
