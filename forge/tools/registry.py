"""The process-wide tool registry and the :func:`tool` decorator.

A tool is registered once, at import time of the module defining it::

    @tool(name="read_file", description="...", parameters={"type": "object", ...})
    def read_file(ctx: ToolContext, args: dict) -> ToolResult: ...

Registration checks, and refuses with :class:`ValueError`:

* a name that is not ``^[a-zA-Z0-9_-]{1,64}$`` (the OpenAI function-name rule);
* a name already taken by another function. Registering *the same* function
  again (the same object, or the same ``__module__`` + ``__qualname__``, which is
  what a module reload produces) replaces the entry instead;
* a ``parameters`` schema that is not a valid JSON schema (Draft 2020-12) or
  whose top-level ``"type"`` is not ``"object"``;
* a ``timeout`` that is not a positive number.

Tests register throw-away tools with :func:`temporary_tools`.
"""

from __future__ import annotations

import copy
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from forge.providers.base import ToolSpec

from .base import Tool, ToolFunction

NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")

F = TypeVar("F", bound=Callable[..., Any])

_registry: dict[str, Tool] = {}
_lock = threading.RLock()


def check_name(name: object) -> str:
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"invalid tool name {name!r}: must be 1-64 characters of letters, digits, '_' or '-'"
        )
    return name


def check_parameters(name: str, parameters: object) -> dict[str, Any]:
    """Refuse a schema that is not a valid Draft 2020-12 schema of an object."""
    if not isinstance(parameters, dict):
        raise ValueError(f"tool {name!r}: parameters must be a JSON schema object (a dict)")
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise ValueError(
            f"tool {name!r}: parameters is not a valid JSON schema: {exc.message}"
        ) from exc
    if parameters.get("type") != "object":
        raise ValueError(f'tool {name!r}: parameters must have a top-level "type": "object"')
    elsewhere = reference_elsewhere(parameters)
    if elsewhere is not None:
        raise ValueError(
            f"tool {name!r}: parameters refers to a schema elsewhere ({elsewhere[:200]!r}); "
            'only references within the schema ("#...") are taken'
        )
    return parameters


_REFERENCES = ("$ref", "$dynamicRef")


def reference_elsewhere(schema: object) -> str | None:
    """The first ``$ref`` / ``$dynamicRef`` of ``schema`` that does not point inside it
    (not ``#...``), or None. Validating against such a schema made jsonschema fetch the
    URL (``urlopen``, on the turn's event loop): a request from this server to wherever
    an MCP server's schema pointed, and a stalled process while it answered (QA)."""
    stack: list[object] = [schema]  # schemas (or lists of them)
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in _REFERENCES and isinstance(value, str) and not value.startswith("#"):
                return value
            if key in _NAMED and isinstance(value, dict):
                stack.extend(value.values())  # names, then schemas: any name is a name
            elif key not in _INSTANCES:  # values, not schemas: a "$ref" there is data
                stack.append(value)
    return None


_INSTANCES = ("default", "const", "enum", "examples")
# Keywords whose value maps names (a property's, a definition's) to schemas.
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def check_timeout(name: str, timeout: object) -> float | None:
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"tool {name!r}: timeout must be a positive number of seconds or None")
    return float(timeout)


def _check(item: Tool) -> None:
    check_name(item.name)
    if not callable(item.function):
        raise ValueError(f"tool {item.name!r}: function is not callable")
    if not isinstance(item.description, str):
        raise ValueError(f"tool {item.name!r}: description must be a string")
    check_parameters(item.name, item.parameters)
    check_timeout(item.name, item.timeout)


def _same_function(a: ToolFunction, b: ToolFunction) -> bool:
    if a is b:
        return True
    module_a, qualname_a = getattr(a, "__module__", None), getattr(a, "__qualname__", None)
    module_b, qualname_b = getattr(b, "__module__", None), getattr(b, "__qualname__", None)
    return (
        module_a is not None
        and qualname_a is not None
        and "<locals>" not in qualname_a
        and (module_a, qualname_a) == (module_b, qualname_b)
    )


def register(item: Tool) -> Tool:
    """Add ``item`` to the registry (see the module docstring for the rules)."""
    _check(item)
    with _lock:
        existing = _registry.get(item.name)
        if existing is not None and not _same_function(existing.function, item.function):
            raise ValueError(
                f"tool {item.name!r} is already registered "
                f"(by {getattr(existing.function, '__module__', '?')}."
                f"{getattr(existing.function, '__qualname__', '?')})"
            )
        _registry[item.name] = item
    return item


def tool(
    *, name: str, description: str, parameters: dict[str, Any], timeout: float | None = None
) -> Callable[[F], F]:
    """Register the decorated function as a tool; the function is returned unchanged.

    The function takes ``(ctx: ToolContext, args: dict)`` and returns a
    ``ToolResult`` or a ``str`` (sync or async). ``timeout`` overrides
    ``settings.FORGE_TOOL_TIMEOUT`` for this tool.
    """
    check_name(name)
    check_parameters(name, parameters)
    checked_timeout = check_timeout(name, timeout)

    def decorator(function: F) -> F:
        register(
            Tool(
                name=name,
                description=description,
                parameters=parameters,
                function=function,
                timeout=checked_timeout,
            )
        )
        return function

    return decorator


def get_tool(name: str) -> Tool | None:
    with _lock:
        return _registry.get(name)


def all_tools() -> list[Tool]:
    """Every registered tool, sorted by name."""
    with _lock:
        return [_registry[name] for name in sorted(_registry)]


def tool_names() -> list[str]:
    with _lock:
        return sorted(_registry)


def tool_specs(names: Iterable[str] | None = None) -> list[ToolSpec]:
    """The tools as the model sees them: all of them (``names`` None), or those named.

    Unknown names are skipped; the result is sorted by name, without duplicates.
    Each spec gets its own copy of the schema.
    """
    with _lock:
        if names is None:
            chosen = [_registry[name] for name in sorted(_registry)]
        else:
            chosen = [_registry[name] for name in sorted(set(names)) if name in _registry]
    return [
        ToolSpec(name=t.name, description=t.description, parameters=copy.deepcopy(t.parameters))
        for t in chosen
    ]


@contextmanager
def temporary_tools(*tools: Tool) -> Iterator[list[Tool]]:
    """Register ``tools`` for the duration of a ``with`` block (for tests).

    The tools are checked like any other. A temporary tool may shadow a
    registered one of the same name; the original is restored on exit.
    """
    for item in tools:
        _check(item)
    names = [item.name for item in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"temporary_tools: duplicate names in {names}")
    with _lock:
        saved = {item.name: _registry.get(item.name) for item in tools}
        for item in tools:
            _registry[item.name] = item
    try:
        yield list(tools)
    finally:
        with _lock:
            for name, previous in saved.items():
                if previous is None:
                    _registry.pop(name, None)
                else:
                    _registry[name] = previous
