"""OpenTelemetry traces of turns, following the GenAI semantic conventions.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``FORGE_OTEL``) is set: then
:func:`configure` (called once a process starts) installs the SDK's tracer provider
with its OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME`` and the
other standard variables apply) behind a ``BatchSpanProcessor``: export runs on the
SDK's own thread, its queue is bounded, and spans are dropped when it is full, so a
collector that is down never slows or fails a turn. Off, every function here is a
no-op costing a context-variable read.

The spans of one reply (a turn):

* ``invoke_agent {agent}``: the turn, in each process that works on it. A turn that
  goes on elsewhere (after a lease takeover, after an approval answered in another
  process, after recovery) belongs to the same trace: the trace id and the root
  span's id are derived from the reply's message id (:func:`turn_ids`), so no
  process needs to tell another. The process that starts the turn exports the root
  span with those ids; a process that resumes it exports a child of it. A subtask's
  reply is a trace of its own, its root linked to the parent's ``execute_tool task``
  span. An aborted turn's span has ``forge.aborted`` (and ``forge.abort_reason``:
  ``user``, ``lease`` for a lost lease, ``shutdown``, or ``cancelled`` for any other
  cancellation, as ``forge.runtime.steps`` marks it); a failed one an error status and
  ``error.type``.
* ``step {n}``: one model call and the tools it asked for.
* ``chat {model}``: the model call (``gen_ai.operation.name`` ``chat``,
  ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``,
  ``gen_ai.response.finish_reasons``; prompts and completions only with
  ``FORGE_OTEL_CAPTURE_CONTENT``).
* ``execute_tool {tool}``: one tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``error.type`` when it failed).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

logger = logging.getLogger(__name__)

_provider: TracerProvider | None = None
_capture_content = False
# Ids the next span must take (the root span of a turn), set by turn_span only.
_forced: ContextVar[tuple[int, int] | None] = ContextVar("forge_otel_forced_ids", default=None)


class _TurnIds(IdGenerator):
    """Random ids, except for a turn's root span, whose ids come from its message id."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        forced = _forced.get()
        return forced[0] if forced else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        forced = _forced.get()
        return forced[1] if forced else self._random.generate_span_id()


# The span of the turn the current task works on (its errors are marked on it).
_turn: ContextVar[Span | None] = ContextVar("forge_turn_span", default=None)


def turn_ids(message_id: str) -> tuple[int, int]:
    """The trace id and root span id of the reply ``message_id``: the same in every
    process, never zero (an invalid id in OpenTelemetry)."""
    digest = hashlib.sha256(f"forge-turn:{message_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


def install(processor: SpanProcessor, *, capture_content: bool = False) -> TracerProvider:
    """Trace into ``processor`` from now on (tests install the SDK's in-memory exporter
    behind a ``SimpleSpanProcessor``); returns the provider."""
    global _provider, _capture_content
    provider = TracerProvider(
        resource=Resource.create({"service.name": "forge"}), id_generator=_TurnIds()
    )
    provider.add_span_processor(processor)
    _provider, _capture_content = provider, capture_content
    return provider


def uninstall() -> None:
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def configure(*, enabled: bool, capture_content: bool) -> None:
    """Install the OTLP/HTTP exporter when tracing is on (see the module docstring)."""
    if not enabled or _provider is not None:
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    install(
        BatchSpanProcessor(OTLPSpanExporter(), max_queue_size=2048, max_export_batch_size=512),
        capture_content=capture_content,
    )
    logger.info("OpenTelemetry traces are exported over OTLP/HTTP")


def enabled() -> bool:
    return _provider is not None


def capturing_content() -> bool:
    return _provider is not None and _capture_content


def _tracer() -> trace.Tracer | None:
    return None if _provider is None else _provider.get_tracer("forge")


@contextlib.contextmanager
def turn_span(
    *, session_id: str, message_id: str, agent: str, model: str, resumed: bool
) -> Iterator[Span | None]:
    """The span of this process's work on the reply ``message_id`` (see the module
    docstring); ``resumed``: the turn began in another process or an earlier pass."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    trace_id, root_id = turn_ids(message_id)
    provider, _, name_only = model.partition("/")
    if not name_only:  # a model string without its provider
        provider, name_only = "", model
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": session_id,
        # as the model call's span names it: the provider apart, the model by its own name
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": name_only,
        "forge.message_id": message_id,
        "forge.resumed": resumed,
    }
    name = f"invoke_agent {agent}"
    if resumed:
        root = SpanContext(
            trace_id, root_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )
        context = trace.set_span_in_context(NonRecordingSpan(root))
        with tracer.start_as_current_span(name, context=context, attributes=attributes) as span:
            token = _turn.set(span)
            try:
                yield span
            finally:
                _turn.reset(token)
        return
    # A subtask's turn (its own reply, so its own trace) is started from the parent's
    # ``execute_tool task`` span: linked to it, so a trace viewer leads from one to the
    # other (QA: nothing joined them).
    caller = trace.get_current_span().get_span_context()
    links = [Link(caller)] if caller.is_valid else []
    forcing = _forced.set((trace_id, root_id))
    try:
        span = tracer.start_span(
            name, context=trace.set_span_in_context(trace.INVALID_SPAN), links=links
        )
    finally:
        _forced.reset(forcing)
    for key, value in attributes.items():
        span.set_attribute(key, value)
    with trace.use_span(span, end_on_exit=True):
        token = _turn.set(span)
        try:
            yield span
        finally:
            _turn.reset(token)


def carry_into(context: contextvars.Context) -> None:
    """Carry the current span into ``context`` (a task's fresh context, which inherits
    nothing else): a subtask's turn, spawned from its parent's tool call, links to it."""
    current = otel_context.get_current()
    context.run(otel_context.attach, current)


def turn_aborted(reason: str) -> None:
    """Mark the span of the turn this task works on as ended by an abort (a user's stop,
    a lost lease, a shutdown): ``forge.aborted``, and why. No error status: the reply
    did not fail, it was stopped (a QA run could not tell an aborted turn's span from a
    finished one's)."""
    current = _turn.get()
    if current is not None:
        current.set_attribute("forge.aborted", True)
        current.set_attribute("forge.abort_reason", reason)


def turn_failed(error_type: str, message: str = "") -> None:
    """Mark the span of the turn this task works on as failed (the reply ended with an
    error): its model call's span says why, the turn's says that it did."""
    failed(_turn.get(), error_type, message)


@contextlib.contextmanager
def span(
    name: str, *, kind: SpanKind = SpanKind.INTERNAL, **attributes: Any
) -> Iterator[Span | None]:
    """A child of the current span (a step, a model call, a tool call)."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    clean = {k.replace("__", "."): v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(name, kind=kind, attributes=clean) as current:
        yield current


def model_call(*, provider: str, model: str, messages: Any = None) -> Any:
    """The ``chat {model}`` span of one model call; ``messages`` (the request) recorded
    only when content capture is on."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": model,
    }
    if messages is not None and capturing_content():
        attributes["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)[:65536]
    tracer = _tracer()
    if tracer is None:
        return contextlib.nullcontext(None)
    return tracer.start_as_current_span(
        f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes
    )


def model_result(
    current: Span | None,
    *,
    input_tokens: int,
    output_tokens: int,
    finish_reason: str | None,
    error: str | None = None,
    output: str | None = None,
) -> None:
    if current is None:
        return
    if not (error and input_tokens == output_tokens == 0):  # a failed call's usage: unknown
        current.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        current.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if finish_reason:
        current.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    if output is not None and capturing_content():
        current.set_attribute("gen_ai.output.messages", output[:65536])
    if error:
        current.set_attribute("error.type", error)
        current.set_status(Status(StatusCode.ERROR, error))


def tool_call(*, tool: str, call_id: str) -> Any:
    tracer = _tracer()
    if tracer is None:
        return contextlib.nullcontext(None)
    # A tool's error quotes the call (a path, a query): the SDK's own recording of the
    # exception (its message, an event with the stack) only where content goes (QA).
    content = capturing_content()
    return tracer.start_as_current_span(
        f"execute_tool {tool}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
        },
        record_exception=content,
        set_status_on_exception=content,
    )


def failed(current: Span | None, error_type: str, message: str = "") -> None:
    """Mark ``current`` failed: ``error.type``, and an error status described by
    ``message`` (none without one: the type is the attribute's already)."""
    if current is not None:
        current.set_attribute("error.type", error_type)
        current.set_status(Status(StatusCode.ERROR, message or None))
