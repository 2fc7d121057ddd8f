from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.tools import (
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    execute,
    get_tool,
    prepare_call,
    temporary_tools,
)
from forge.tools.execute import MAX_OUTPUT_CHARS
from forge.tools.registry import all_tools

from . import make_context

OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": False}
NOT_A_STRING_OUTPUT = ToolResult(output=5)  # type: ignore[arg-type]


def make(name: str, function: Any, *, timeout: float | None = None, **schema: Any) -> Tool:
    return Tool(
        name=name,
        description=f"the {name} tool",
        parameters={**OBJECT, **schema},
        function=function,
        timeout=timeout,
    )


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return make_context(tmp_path)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test, so a blocked worker thread ends promptly."""
    event = threading.Event()
    yield event
    event.set()


# --- prepare_call -----------------------------------------------------------------------


def test_prepare_call_parses_and_validates() -> None:
    tool, args = prepare_call("read_file", '{"path": "a.txt", "offset": 3}')
    assert tool is get_tool("read_file")
    assert args == {"path": "a.txt", "offset": 3}


def test_prepare_call_treats_empty_input_as_an_empty_object() -> None:
    tool, args = prepare_call("list_files", "")
    assert tool.name == "list_files"
    assert args == {}
    _, args = prepare_call("list_files", "  \n")
    assert args == {}


def test_an_over_long_argument_is_not_echoed_back_whole() -> None:
    """QA (LOW): a 10,000-character query over the schema's ``maxLength`` got an error
    of 2,000 characters, the query repeated back to the model: the value is shortened
    in the message, which says the limit."""
    with pytest.raises(ToolError) as info:
        prepare_call("memory_search", json.dumps({"query": "x" * 10_000}))
    message = info.value.message
    assert len(message) < 300, message
    assert message.startswith("invalid input for memory_search: query: 'xxxx")
    assert "is too long" in message
    assert "10000 characters" in message
    # An unexpected property's long name, too (review).
    with pytest.raises(ToolError) as info:
        prepare_call("memory_search", json.dumps({"query": "x", "k" * 5000: 1}))
    assert len(info.value.message) < 300, info.value.message
    assert "'kkkk" in info.value.message


def test_unknown_tool_lists_the_available_ones() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("rm_rf", '{"path": "/"}')
    assert info.value.message.startswith("unknown tool 'rm_rf'; available: ")
    listed = info.value.message.split("available: ", 1)[1].split(", ")
    assert listed == sorted(listed)
    assert {"edit_file", "list_files", "read_file", "write_file"} <= set(listed)
    assert info.value.metadata["input"] == {"path": "/"}


def test_unknown_tool_lists_only_what_the_agent_may_use() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("rm_rf", "{}", allowed=["read_file", "list_files", "ghost"])
    assert info.value.message == "unknown tool 'rm_rf'; available: list_files, read_file"


def test_an_allowed_but_unregistered_name_is_unknown() -> None:
    with pytest.raises(ToolError, match="unknown tool 'ghost'"):
        prepare_call("ghost", "{}", allowed=["ghost"])


def test_a_tool_outside_allowed_is_refused() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("write_file", '{"path": "a", "content": "x"}', allowed={"read_file"})
    assert info.value.message.startswith("tool 'write_file' is not available to this agent")
    assert info.value.metadata["input"] == {"path": "a", "content": "x"}
    # An empty allowed set allows nothing; None allows everything.
    with pytest.raises(ToolError, match="not available to this agent"):
        prepare_call("read_file", '{"path": "a"}', allowed=())
    assert prepare_call("read_file", '{"path": "a"}', allowed=None)[1] == {"path": "a"}


def test_invalid_json_keeps_the_raw_input_truncated() -> None:
    raw = '{"path": "a.txt", "content": "' + "x" * 5000
    with pytest.raises(ToolError) as info:
        prepare_call("write_file", raw)
    assert info.value.message.startswith("invalid input for write_file: arguments are not valid")
    assert info.value.metadata["raw_input"] == raw[:2000]
    assert info.value.metadata["input"] == {}


def test_arguments_nested_deeper_than_the_log_takes_are_a_tool_error() -> None:
    """The log refuses objects nested deeper than ``MAX_DEPTH`` (a third-round finding):
    a model's call that deep is the model's error to see, not a failed turn."""
    from sessions.shapes import MAX_DEPTH

    raw = '{"path": ' + '{"a": ' * MAX_DEPTH + "1" + "}" * MAX_DEPTH + "}"
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", raw)
    assert f"nested deeper than {MAX_DEPTH} levels" in info.value.message
    assert info.value.metadata["input"] == {}


@pytest.mark.parametrize(
    "raw",
    [
        '{"path": "a", "offset": 1e400}',
        '{"path": "a", "offset": NaN}',
        '{"path": "a", "offset": -Infinity}',
    ],
)
def test_numbers_the_log_cannot_store_are_invalid_input(raw: str) -> None:
    """A QA finding: Python's JSON reads NaN, Infinity and 1e400 (as inf), which the log
    refuses: the reply ended with a server error instead of the call with a tool error."""
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", raw)
    assert "arguments are not valid JSON" in info.value.message
    assert info.value.metadata["input"] == {}
    assert info.value.metadata["raw_input"] == raw


@pytest.mark.parametrize(
    ("raw", "kind"), [("[1, 2]", "list"), ('"path"', "str"), ("3", "int"), ("null", "null")]
)
def test_json_that_is_not_an_object_is_refused(raw: str, kind: str) -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", raw)
    assert info.value.message == (
        f"invalid input for read_file: arguments must be a JSON object, not {kind}"
    )
    assert info.value.metadata == {"input": {}}


def test_a_missing_property_is_named() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", "{}")
    assert info.value.message == "invalid input for read_file: 'path' is a required property"
    assert info.value.metadata == {"input": {}}


def test_a_wrong_type_names_its_path() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", '{"path": "a", "offset": "ten"}')
    assert (
        info.value.message == "invalid input for read_file: offset: 'ten' is not of type 'integer'"
    )
    assert info.value.metadata["input"] == {"path": "a", "offset": "ten"}


def test_a_nested_path_is_named() -> None:
    schema: dict[str, Any] = {
        "properties": {
            "items": {"type": "array", "items": {"type": "object", "required": ["id"]}},
        }
    }
    with (
        temporary_tools(make("nested", lambda ctx, args: "", **schema)),
        pytest.raises(ToolError) as info,
    ):
        prepare_call("nested", '{"items": [{"id": 1}, {}]}')
    assert info.value.message == "invalid input for nested: items.1: 'id' is a required property"


def test_extra_properties_are_refused() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", '{"path": "a", "mode": "rb"}')
    assert "Additional properties are not allowed ('mode' was unexpected)" in info.value.message
    assert info.value.metadata["input"] == {"path": "a", "mode": "rb"}


def test_several_problems_are_counted() -> None:
    with pytest.raises(ToolError) as info:
        prepare_call("read_file", '{"offset": 0, "limit": 0}')
    assert info.value.message.startswith("invalid input for read_file: ")
    assert "more problem" in info.value.message


# An integer argument past what the tool can use (2**31 - 1: message indexes, line numbers
# and counts are 32-bit) is the model's error, told to it by the schema. ``1e30`` is an
# integer to JSON Schema, and whole floats reach the tool as ints (be8abfb): unbounded,
# memory_read went on with start 1000000000000000019884624838656 and showed it.
INT_MAX = 2**31 - 1


def _integer_properties(schema: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(schema, dict):
        kinds = schema.get("type")
        if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
            yield where, schema
        for key, value in schema.items():
            yield from _integer_properties(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _integer_properties(value, f"{where}.{index}")


def test_every_builtin_integer_argument_is_bounded() -> None:
    names = {item.name for item in all_tools()}
    assert {"memory_read", "memory_search", "history_read", "read_file"} <= names
    found = 0
    for item in all_tools():
        for where, prop in _integer_properties(item.parameters, item.name):
            found += 1
            assert isinstance(prop.get("minimum"), int), where
            assert isinstance(prop.get("maximum"), int), where
            assert prop["minimum"] <= prop["maximum"] <= INT_MAX, where
    assert found >= 7


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("memory_read", {"unit_id": "mun_x", "start": 1e30}),
        ("memory_read", {"unit_id": "mun_x", "end": 1e30}),
        ("memory_read", {"unit_id": "mun_x", "start": 10**30}),
        ("memory_read", {"unit_id": "mun_x", "start": INT_MAX + 1}),
        ("memory_search", {"query": "x", "limit": 1e30}),
        ("history_read", {"part_id": "prt_x", "offset": 1e30}),
        ("history_read", {"limit": 1e30}),
        ("read_file", {"path": "a", "offset": 1e30}),
        ("read_file", {"path": "a", "limit": 1e30}),
    ],
)
def test_an_integer_beyond_the_tools_range_is_refused_not_rounded(
    name: str, args: dict[str, Any]
) -> None:
    with pytest.raises(ToolError) as info:
        prepare_call(name, json.dumps(args))
    assert info.value.message.startswith(f"invalid input for {name}: ")
    assert "is greater than the maximum of" in info.value.message


def test_a_whole_float_too_large_to_be_exact_is_refused_by_a_tool_without_a_maximum() -> None:
    """A tool of its own (an MCP server's) may name an integer without a maximum: a whole
    float past 2**53 is no exact integer, so it is refused rather than rounded."""
    schema: dict[str, Any] = {"properties": {"n": {"type": "integer"}}}
    with temporary_tools(make("counts", lambda ctx, args: "", **schema)):
        assert prepare_call("counts", '{"n": 9007199254740992.0}')[1] == {"n": 2**53}
        assert prepare_call("counts", json.dumps({"n": 10**30}))[1] == {"n": 10**30}
        with pytest.raises(ToolError) as info:
            prepare_call("counts", '{"n": 1e30}')
    assert info.value.message == (
        "invalid input for counts: n: 1e+30 is too large to be an exact integer "
        "(at most 9007199254740992 as a number with a fraction or exponent)"
    )
    assert info.value.metadata == {"input": {"n": 1e30}}


# --- execute: results -------------------------------------------------------------------


async def test_async_tool_result_passes_through(ctx: ToolContext) -> None:
    seen: list[Any] = []

    async def fn(c: ToolContext, args: dict[str, Any]) -> ToolResult:
        seen.append((c, args))
        return ToolResult(output="done", title="t", metadata={"k": 1})

    result = await execute(make("a", fn), {"x": 1}, ctx)
    assert result == ToolResult(output="done", title="t", metadata={"k": 1})
    assert seen == [(ctx, {"x": 1})]


async def test_sync_tool_runs_in_a_worker_thread(ctx: ToolContext) -> None:
    threads: list[int] = []

    def fn(c: ToolContext, args: dict[str, Any]) -> str:
        threads.append(threading.get_ident())
        return f"hello {args['who']}"

    result = await execute(make("s", fn), {"who": "you"}, ctx)
    assert result == ToolResult(output="hello you")
    assert threads
    assert threads[0] != threading.get_ident()


async def test_async_string_result_becomes_a_tool_result(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        return "plain"

    assert await execute(make("a", fn), {}, ctx) == ToolResult(output="plain")


async def test_an_async_callable_object_is_awaited(ctx: ToolContext) -> None:
    class Callable:
        async def __call__(self, c: ToolContext, args: dict[str, Any]) -> str:
            return "called"

    assert (await execute(make("obj", Callable()), {}, ctx)).output == "called"


@pytest.mark.parametrize("bad", [None, 42, {"output": "x"}, b"bytes", NOT_A_STRING_OUTPUT])
async def test_a_result_of_the_wrong_type_is_an_error(ctx: ToolContext, bad: Any) -> None:
    with pytest.raises(ToolError) as info:
        await execute(make("wrong", lambda c, a: bad), {}, ctx)
    assert info.value.message.startswith("tool 'wrong' failed: ")
    assert "expected" in info.value.message
    assert info.value.metadata == {"exception": "TypeError"}


async def test_long_output_is_returned_whole(ctx: ToolContext) -> None:
    """execute() no longer cuts: the log keeps the raw output (issue 19, item 4); only
    the model's projection truncates it (tests/context/test_tool_output_projection.py)."""
    text = "abcdefghij" * 6_000  # 60,000 characters, over what the model is shown
    result = await execute(
        make("long", lambda c, a: ToolResult(output=text, title="t", metadata={"k": 1})), {}, ctx
    )
    assert result.output == text
    assert result.metadata == {"k": 1}
    assert result.title == "t"


async def test_output_at_the_limit_is_kept_whole(ctx: ToolContext) -> None:
    text = "x" * MAX_OUTPUT_CHARS
    result = await execute(make("exact", lambda c, a: text), {}, ctx)
    assert result.output == text
    assert "truncated" not in result.metadata


# --- execute: failures ------------------------------------------------------------------


async def test_tool_error_passes_through(ctx: ToolContext) -> None:
    error = ToolError("file is locked", metadata={"path": "a"})

    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise error

    def sync_fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise error

    for function in (fn, sync_fn):
        with pytest.raises(ToolError) as info:
            await execute(make("locked", function), {}, ctx)
        assert info.value is error


async def test_an_exception_becomes_a_tool_error(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise ValueError("boom")

    def sync_fn(c: ToolContext, args: dict[str, Any]) -> str:
        empty: dict[str, str] = {}
        return empty["missing"]

    with pytest.raises(ToolError) as info:
        await execute(make("explode", fn), {}, ctx)
    assert info.value.message == "tool 'explode' failed: ValueError: boom"
    assert info.value.metadata == {"exception": "ValueError"}
    assert isinstance(info.value.__cause__, ValueError)

    with pytest.raises(ToolError) as info:
        await execute(make("lookup", sync_fn), {}, ctx)
    assert info.value.message == "tool 'lookup' failed: KeyError: 'missing'"
    assert info.value.metadata == {"exception": "KeyError"}


async def test_a_tool_that_tries_to_exit_the_process_gets_a_tool_error(ctx: ToolContext) -> None:
    """QA (HIGH): a tool raising SystemExit (argparse's ``parser.error``, ``sys.exit``
    in a script turned into a tool) or KeyboardInterrupt went past ``except Exception``
    to the event loop: the daphne stopped answering without exiting, and the reply
    stayed open with the call running. It is the tool's failure, like any other."""

    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise SystemExit(2)

    def sync_fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise KeyboardInterrupt

    with pytest.raises(ToolError) as info:
        await execute(make("cli", fn), {}, ctx)
    assert info.value.message == "tool 'cli' failed: SystemExit: 2"
    assert info.value.metadata == {"exception": "SystemExit"}

    with pytest.raises(ToolError) as info:
        await execute(make("interrupted", sync_fn), {}, ctx)
    assert info.value.message == "tool 'interrupted' failed: KeyboardInterrupt"
    assert info.value.metadata == {"exception": "KeyboardInterrupt"}


async def test_a_timeout_error_raised_by_the_tool_is_not_a_timeout(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise TimeoutError("socket timed out")

    with pytest.raises(ToolError) as info:
        await execute(make("net", fn), {}, ctx, timeout=5)
    assert info.value.message == "tool 'net' failed: TimeoutError: socket timed out"
    assert info.value.metadata == {"exception": "TimeoutError"}


async def test_an_async_tool_times_out(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        await asyncio.sleep(10)
        return "late"

    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        await execute(make("slow", fn), {}, ctx, timeout=0.05)
    assert time.monotonic() - started < 1
    assert info.value.message == "tool 'slow' timed out after 0.05 s"
    assert info.value.metadata == {"timeout": 0.05}


async def test_a_sync_tool_times_out(ctx: ToolContext, release: threading.Event) -> None:
    def fn(c: ToolContext, args: dict[str, Any]) -> str:
        release.wait(5)
        return "late"

    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match=r"^tool 'blocking' timed out after 0.05 s$"):
            await execute(make("blocking", fn), {}, ctx, timeout=0.05)
        assert time.monotonic() - started < 1
    finally:
        release.set()  # let the abandoned thread end, so the loop can close quickly


async def test_the_tool_timeout_applies_when_none_is_given(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        await asyncio.sleep(10)
        return "late"

    with pytest.raises(ToolError) as info:
        await execute(make("own", fn, timeout=0.05), {}, ctx)
    assert info.value.metadata == {"timeout": 0.05}
    # An explicit timeout wins over the tool's.
    with pytest.raises(ToolError) as info:
        await execute(make("own", fn, timeout=30), {}, ctx, timeout=0.02)
    assert info.value.metadata == {"timeout": 0.02}


async def test_the_settings_timeout_is_read_at_call_time(ctx: ToolContext, settings: Any) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        await asyncio.sleep(10)
        return "late"

    settings.FORGE_TOOL_TIMEOUT = 0.05
    with pytest.raises(ToolError) as info:
        await execute(make("default", fn), {}, ctx)
    assert info.value.message == "tool 'default' timed out after 0.05 s"


async def test_a_fast_tool_is_not_affected_by_the_timeout(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        await asyncio.sleep(0)
        return "quick"

    assert (await execute(make("quick", fn), {}, ctx, timeout=5)).output == "quick"


# --- execute: cancellation --------------------------------------------------------------


async def test_cancelling_an_async_tool_propagates(ctx: ToolContext) -> None:
    started = asyncio.Event()

    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        started.set()
        await asyncio.sleep(10)
        return "late"

    task = asyncio.create_task(execute(make("cancel_me", fn), {}, ctx, timeout=30))
    await asyncio.wait_for(started.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
    assert task.cancelled()


async def test_cancelling_a_sync_tool_ends_the_await_promptly(
    ctx: ToolContext, release: threading.Event
) -> None:
    started, finished = threading.Event(), threading.Event()

    def fn(c: ToolContext, args: dict[str, Any]) -> str:
        started.set()
        release.wait(5)  # a sync tool that would run far longer than the test allows
        finished.set()
        return "late"

    task = asyncio.create_task(execute(make("stuck", fn), {}, ctx, timeout=30))
    try:
        assert await asyncio.to_thread(started.wait, 1)
        begun = time.monotonic()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1)
        assert done == {task}
        assert time.monotonic() - begun < 1
        assert task.cancelled()
        assert not finished.is_set()  # the thread was still running when the await ended
    finally:
        release.set()  # let the abandoned thread end, so the loop can close quickly


async def test_a_tool_raising_cancelled_error_is_not_swallowed(ctx: ToolContext) -> None:
    async def fn(c: ToolContext, args: dict[str, Any]) -> str:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await execute(make("aborting", fn), {}, ctx)


async def test_prepare_then_execute_a_temporary_tool(ctx: ToolContext) -> None:
    def echo(c: ToolContext, args: dict[str, Any]) -> str:
        return json.dumps(args, sort_keys=True)

    with temporary_tools(
        make(
            "echo",
            echo,
            properties={"text": {"type": "string"}},
            required=["text"],
        )
    ):
        tool, args = prepare_call("echo", '{"text": "hi"}', allowed=["echo"])
        result = await execute(tool, args, ctx)
    assert result.output == '{"text": "hi"}'


# --- schemas that refer elsewhere (QA, HIGH) ---------------------------------------------


@pytest.fixture
def fetched() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every request: where a remote ``$ref`` points."""
    import http.server

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/internal-metadata", hits
    server.shutdown()
    server.server_close()


def test_a_schema_referring_to_a_remote_schema_is_refused(fetched) -> None:
    """jsonschema's default resolver fetched a remote ``$ref`` with ``urlopen``, on the
    event loop, when the model called the tool: a request to any URL an MCP server's
    schema named, and a stall of the whole process while it answered (QA)."""
    url, hits = fetched
    for schema in (
        {"properties": {"x": {"$ref": url}}},
        {"$id": url, "properties": {"x": {"$ref": "other.json"}}},
        {"properties": {"x": {"$dynamicRef": url}}},
        {"properties": {"default": {"$ref": url}}},  # a property named like a keyword
    ):
        tool = make("remote_ref", lambda ctx, args: "x", **schema)
        with pytest.raises(ValueError, match="refers to a schema elsewhere"), temporary_tools(tool):
            pass
    # A property named "$ref", and "$ref" in a default or an example, are no reference.
    named: dict[str, Any] = {
        "properties": {"$ref": {"type": "string", "default": {"$ref": "http://x/y"}}},
        "examples": [{"$ref": "http://x/z"}],
    }
    with temporary_tools(make("named_ref", lambda ctx, args: "x", **named)):
        assert prepare_call("named_ref", '{"$ref": "a"}')[1] == {"$ref": "a"}
    local: dict[str, Any] = {
        "$defs": {"n": {"type": "integer"}},
        "properties": {"x": {"$ref": "#/$defs/n"}},
    }
    with temporary_tools(make("local_ref", lambda ctx, args: "x", **local)):
        assert prepare_call("local_ref", '{"x": 3}')[1] == {"x": 3}
        with pytest.raises(ToolError, match="is not of type"):
            prepare_call("local_ref", '{"x": "three"}')
    # A tool that got past the check (not through the registry) is still never fetched.
    item = make("elsewhere", lambda ctx, args: "x", properties={"x": {"$ref": url}})
    with pytest.raises(ToolError, match="cannot be resolved"):
        prepare_call("elsewhere", '{"x": 3}', extra={"elsewhere": item})
    assert hits == []
