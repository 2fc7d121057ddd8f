from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest

import forge.tools
from forge.providers.base import ToolSpec
from forge.tools import (
    Tool,
    ToolContext,
    all_tools,
    get_tool,
    temporary_tools,
    tool,
    tool_specs,
)
from forge.tools import registry as registry_module

OBJECT = {"type": "object", "properties": {}, "additionalProperties": False}
BUILTINS = {"edit_file", "list_files", "read_file", "write_file"}


def noop(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "ok"


def other(ctx: ToolContext, args: dict[str, Any]) -> str:
    return "other"


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Undo whatever a test registers with the decorator."""
    saved = dict(registry_module._registry)
    yield
    registry_module._registry.clear()
    registry_module._registry.update(saved)


def make(name: str, function: Any = noop, **kwargs: Any) -> Tool:
    return Tool(
        name=name,
        description=kwargs.pop("description", f"the {name} tool"),
        parameters=kwargs.pop("parameters", OBJECT),
        function=function,
        **kwargs,
    )


# --- registration -----------------------------------------------------------------------


@pytest.mark.usefixtures("clean_registry")
def test_decorator_registers_and_returns_the_function_unchanged() -> None:
    def greet(ctx: ToolContext, args: dict[str, Any]) -> str:
        return "hi"

    decorated = tool(name="greet", description="Say hi.", parameters=OBJECT, timeout=5)(greet)

    assert decorated is greet
    registered = get_tool("greet")
    assert registered == Tool(
        name="greet", description="Say hi.", parameters=OBJECT, function=greet, timeout=5.0
    )


@pytest.mark.usefixtures("clean_registry")
def test_async_functions_register_too() -> None:
    @tool(name="async_greet", description="", parameters=OBJECT)
    async def async_greet(ctx: ToolContext, args: dict[str, Any]) -> str:
        return "hi"

    registered = get_tool("async_greet")
    assert registered is not None
    assert registered.function is async_greet
    assert registered.timeout is None


@pytest.mark.parametrize(
    "name", ["", "has space", "dot.ted", "slash/ed", "x" * 65, "café", "trailing\n", None, 3]
)
@pytest.mark.usefixtures("clean_registry")
def test_bad_names_are_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        tool(name=name, description="", parameters=OBJECT)(noop)
    assert name not in {t.name for t in all_tools()}


@pytest.mark.parametrize("name", ["a", "read_file2", "kebab-case", "UPPER", "x" * 64])
@pytest.mark.usefixtures("clean_registry")
def test_good_names_are_accepted(name: str) -> None:
    tool(name=name, description="", parameters=OBJECT)(noop)
    assert get_tool(name) is not None


@pytest.mark.usefixtures("clean_registry")
def test_a_duplicate_name_is_refused() -> None:
    tool(name="dup", description="", parameters=OBJECT)(noop)
    with pytest.raises(ValueError, match="already registered"):
        tool(name="dup", description="", parameters=OBJECT)(other)
    tool_ = get_tool("dup")
    assert tool_ is not None
    assert tool_.function is noop


@pytest.mark.usefixtures("clean_registry")
def test_builtin_names_cannot_be_taken() -> None:
    with pytest.raises(ValueError, match="already registered"):
        tool(name="read_file", description="", parameters=OBJECT)(noop)


@pytest.mark.usefixtures("clean_registry")
def test_re_registering_the_same_function_replaces_it() -> None:
    tool(name="again", description="first", parameters=OBJECT)(noop)
    tool(name="again", description="second", parameters=OBJECT)(noop)
    registered = get_tool("again")
    assert registered is not None
    assert registered.description == "second"


@pytest.mark.usefixtures("clean_registry")
def test_a_reloaded_module_may_register_its_new_function_object() -> None:
    """A module reload makes a new function object with the same module and qualname."""
    tool(name="reloaded", description="v1", parameters=OBJECT)(noop)
    reloaded = types.FunctionType(noop.__code__, noop.__globals__, "noop")
    reloaded.__qualname__ = noop.__qualname__
    assert reloaded is not noop

    tool(name="reloaded", description="v2", parameters=OBJECT)(reloaded)

    registered = get_tool("reloaded")
    assert registered is not None
    assert registered.function is reloaded
    assert registered.description == "v2"


@pytest.mark.usefixtures("clean_registry")
def test_two_local_functions_with_the_same_qualname_are_different_tools() -> None:
    def factory() -> Any:
        def inner(ctx: ToolContext, args: dict[str, Any]) -> str:
            return "x"

        return inner

    tool(name="local", description="", parameters=OBJECT)(factory())
    with pytest.raises(ValueError, match="already registered"):
        tool(name="local", description="", parameters=OBJECT)(factory())


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "object", "properties": {"a": {"type": "nope"}}}, "not a valid JSON schema"),
        ({"type": "object", "required": "a"}, "not a valid JSON schema"),
        ({"type": "object", "properties": {"a": {"minLength": -1}}}, "not a valid JSON schema"),
        ({"type": "array"}, "top-level"),
        ({"properties": {"a": {"type": "string"}}}, "top-level"),
        ({"type": ["object", "null"]}, "top-level"),
        ([], "must be a JSON schema object"),
        ("object", "must be a JSON schema object"),
    ],
)
@pytest.mark.usefixtures("clean_registry")
def test_bad_schemas_are_refused(parameters: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tool(name="schema_test", description="", parameters=parameters)(noop)
    assert get_tool("schema_test") is None


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True])
@pytest.mark.usefixtures("clean_registry")
def test_bad_timeouts_are_refused(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout"):
        tool(name="timeout_test", description="", parameters=OBJECT, timeout=timeout)(noop)


# --- lookup and specs -------------------------------------------------------------------


def test_builtin_workspace_tools_are_registered_on_import() -> None:
    assert {t.name for t in all_tools()} >= BUILTINS
    for name in BUILTINS:
        registered = get_tool(name)
        assert registered is not None
        assert registered.parameters["additionalProperties"] is False


def test_get_tool_of_an_unknown_name_is_none() -> None:
    assert get_tool("no_such_tool") is None


def test_all_tools_is_sorted_by_name() -> None:
    with temporary_tools(make("zzz_last"), make("aaa_first")):
        names = [t.name for t in all_tools()]
    assert names == sorted(names)
    assert names[0] == "aaa_first"
    assert names[-1] == "zzz_last"


def test_tool_specs_describe_every_tool() -> None:
    specs = tool_specs()
    assert [s.name for s in specs] == [t.name for t in all_tools()]
    read = next(s for s in specs if s.name == "read_file")
    registered = get_tool("read_file")
    assert registered is not None
    assert read == ToolSpec(
        name="read_file",
        description=registered.description,
        parameters=registered.parameters,
    )
    assert read.as_dict()["parameters"]["required"] == ["path"]


def test_tool_specs_for_names_skips_unknown_ones() -> None:
    specs = tool_specs(["write_file", "nope", "read_file", "read_file"])
    assert [s.name for s in specs] == ["read_file", "write_file"]
    assert tool_specs([]) == []
    assert tool_specs(iter(["list_files"]))[0].name == "list_files"


def test_tool_specs_hand_out_copies_of_the_schema() -> None:
    spec = tool_specs(["read_file"])[0]
    spec.parameters["properties"]["injected"] = {"type": "string"}
    registered = get_tool("read_file")
    assert registered is not None
    assert "injected" not in registered.parameters["properties"]


# --- temporary_tools --------------------------------------------------------------------


def test_temporary_tools_register_and_remove() -> None:
    first, second = make("temp_one"), make("temp_two", other)
    with temporary_tools(first, second) as registered:
        assert registered == [first, second]
        assert get_tool("temp_one") is first
        assert get_tool("temp_two") is second
        assert [s.name for s in tool_specs(["temp_one"])] == ["temp_one"]
    assert get_tool("temp_one") is None
    assert get_tool("temp_two") is None


def test_temporary_tools_are_removed_after_an_exception() -> None:
    with pytest.raises(RuntimeError), temporary_tools(make("temp_boom")):
        raise RuntimeError
    assert get_tool("temp_boom") is None


def test_temporary_tools_may_shadow_and_restore_a_tool() -> None:
    original = get_tool("read_file")
    fake = make("read_file", other)
    with temporary_tools(fake):
        assert get_tool("read_file") is fake
    assert get_tool("read_file") is original


def test_temporary_tools_are_checked() -> None:
    with pytest.raises(ValueError, match="invalid tool name"), temporary_tools(make("bad name")):
        pass
    with (
        pytest.raises(ValueError, match="top-level"),
        temporary_tools(make("temp_bad", parameters={"type": "string"})),
    ):
        pass
    with pytest.raises(ValueError, match="duplicate"), temporary_tools(make("t"), make("t")):
        pass
    assert get_tool("temp_bad") is None


def test_public_api() -> None:
    expected = {
        "tool",
        "get_tool",
        "all_tools",
        "tool_specs",
        "temporary_tools",
        "prepare_call",
        "execute",
        "workspace_path",
        "resolve_in_workspace",
        "snapshot",
        "Snapshot",
        "changed_files",
    }
    assert expected <= set(forge.tools.__all__)
    for name in forge.tools.__all__:
        assert hasattr(forge.tools, name)
