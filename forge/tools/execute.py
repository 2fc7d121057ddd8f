"""Turning a model's tool call into a result: :func:`prepare_call`, then :func:`execute`.

Every failure the model should hear about is a :class:`ToolError`; nothing else
escapes, except :class:`asyncio.CancelledError` (an abort), which always
propagates untouched.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from django.conf import settings
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry
from referencing.exceptions import Unresolvable

from forge.telemetry import metrics
from sessions.shapes import MAX_DEPTH, too_deep
from sessions.storable import NUL, holds_surrogate, nul_path, surrogate_path

from .base import DEFAULT_TIMEOUT, Tool, ToolContext, ToolError, ToolResult
from .registry import get_tool, tool_names

# What the model is shown of one output, marker included (forge.context truncates it
# there; the log keeps it whole). Tools that page their own output stay under it.
MAX_OUTPUT_CHARS = 50_000
MAX_RAW_INPUT_CHARS = 2_000  # how much of unparseable input is kept in the error's metadata
# What the log cannot store in a text: NUL, and the surrogates (alone in a str).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_ERROR_CHARS = 2_000  # how much of an unexpected exception's message reaches the model


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _shown(text: str) -> str:
    """Text for an error message or its metadata: the log stores no NUL (U+0000) and no
    lone surrogate (half a UTF-16 pair, no text), so each is shown as U+FFFD."""
    if NUL not in text and not holds_surrogate(text):
        return text
    return _UNSTORABLE.sub("\ufffd", text)


def _shown_value(value: Any) -> Any:
    """:func:`_shown` applied to every string (keys too) of a JSON-like value."""
    if isinstance(value, str):
        return _shown(value)
    if isinstance(value, dict):
        return {_shown_value(k): _shown_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shown_value(v) for v in value]
    return value


def _storable(error: ToolError) -> ToolError:
    """A tool's own error, with any NUL in its message or metadata shown as U+FFFD."""
    if (
        _shown(error.message) is error.message
        and nul_path(error.metadata, "metadata") is None
        and surrogate_path(error.metadata, "metadata") is None
    ):
        return error
    return ToolError(_shown(error.message), metadata=_shown_value(error.metadata))


def _path_of(error: ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path)


# Where a schema's references are looked up: nowhere but the schema itself. The default
# (jsonschema's deprecated resolver) fetched a remote ``$ref`` with ``urlopen`` (QA).
_NOWHERE: Registry = Registry()


def prepare_call(
    name: str,
    raw_input: str,
    allowed: Collection[str] | None = None,
    extra: Mapping[str, Tool] | None = None,
) -> tuple[Tool, dict[str, Any]]:
    """Look up the tool and parse + validate its JSON input.

    ``allowed`` (None: every registered tool) is what the calling agent may use;
    ``extra`` are the agent's own tools (its MCP servers'), always allowed.
    Raises :class:`ToolError` for an unknown or disallowed tool, input that is not
    a JSON object, or input failing the tool's schema. ``metadata["input"]`` is
    always set: the parsed object when there is one, else ``{}``; unparseable
    input is also kept (truncated) in ``metadata["raw_input"]``. Arguments holding a
    NUL character (U+0000, ``"\\u0000"`` in the JSON) are refused too: the log, which
    records a call's input, stores no NUL; ``metadata`` then has ``input: {}`` and
    the raw JSON text (in which the NUL is an escape, six plain characters). So are
    arguments holding a lone surrogate (``"\\ud800"``, half a UTF-16 pair: no text).

    An empty (or all-blank) ``raw_input`` counts as ``{}``: models send that for
    tools without parameters.
    """
    parsed: Any = None
    parse_error: str | None = None
    if raw_input is None or not raw_input.strip():
        parsed = {}
    else:
        try:
            parsed = json.loads(raw_input, parse_constant=_no_constant, parse_float=_finite_float)
        except (ValueError, RecursionError) as exc:
            parse_error = str(exc) if isinstance(exc, ValueError) else "nested too deeply"
        if parse_error is None and too_deep(parsed):  # the log would refuse it
            parsed, parse_error = None, f"nested deeper than {MAX_DEPTH} levels"
    nul_at = nul_path(parsed, "arguments") if parsed is not None else None
    lone_at = surrogate_path(parsed, "arguments") if parsed is not None else None
    storable = nul_at is None and lone_at is None
    args: dict[str, Any] = parsed if isinstance(parsed, dict) and storable else {}

    registered = tool_names()
    available = registered if allowed is None else [n for n in registered if n in allowed]
    own = dict(extra or {})
    available = sorted({*available, *own})
    item = own.get(name) or get_tool(name)
    if item is None:
        listing = ", ".join(available) if available else "(none)"
        raise ToolError(f"unknown tool {name!r}; available: {listing}", metadata={"input": args})
    if allowed is not None and name not in allowed and name not in own:
        raise ToolError(
            f"tool {name!r} is not available to this agent; available: "
            + (", ".join(available) if available else "(none)"),
            metadata={"input": args},
        )
    if parse_error is not None:
        raise ToolError(
            f"invalid input for {name}: arguments are not valid JSON ({_shown(parse_error)})",
            metadata={"input": {}, "raw_input": _shown(raw_input[:MAX_RAW_INPUT_CHARS])},
        )
    if nul_at is not None:
        raise ToolError(
            f"invalid input for {name}: {nul_at} holds a NUL character (U+0000), which "
            "cannot be stored; send the text without it",
            metadata={"input": {}, "raw_input": _shown(raw_input[:MAX_RAW_INPUT_CHARS])},
        )
    if lone_at is not None:
        raise ToolError(
            f"invalid input for {name}: {lone_at} holds a lone surrogate (U+D800-U+DFFF, "
            "half a UTF-16 pair), which is no text and cannot be stored; send whole "
            "characters",
            metadata={"input": {}, "raw_input": _shown(raw_input[:MAX_RAW_INPUT_CHARS])},
        )
    if not isinstance(parsed, dict):
        raise ToolError(
            f"invalid input for {name}: arguments must be a JSON object, "
            f"not {type(parsed).__name__ if parsed is not None else 'null'}",
            metadata={"input": {}},
        )
    try:
        validator = Draft202012Validator(item.parameters, registry=_NOWHERE)
        errors = list(validator.iter_errors(args))
    except Unresolvable as exc:  # a reference the registry's check would have refused
        raise ToolError(
            f"invalid schema of {name}: a reference in it cannot be resolved ({exc})",
            metadata={"input": args},
        ) from None
    if errors:
        error = best_match(errors)
        where = _path_of(error)
        message = f"invalid input for {name}: " + (f"{where}: " if where else "") + _said(error)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        raise ToolError(_truncate(message, MAX_ERROR_CHARS), metadata={"input": args})
    return item, _whole_numbers(name, item.parameters, args)


SHOWN_VALUE_CHARS = 60  # of a quoted value an error message repeats
_LONG_QUOTED = re.compile(
    rf"'(?:[^'\\]|\\.){{{2 * SHOWN_VALUE_CHARS},}}'|\"(?:[^\"\\]|\\.){{{2 * SHOWN_VALUE_CHARS},}}\""
)


def _said(error: ValidationError) -> str:
    """``error``'s message, each long quoted value in it shortened (QA: a 10,000-character
    query came back whole, up to the message's 2,000 characters; so did an unexpected
    property's name), the failing value's length said."""
    message = _LONG_QUOTED.sub(lambda m: m.group()[:SHOWN_VALUE_CHARS] + "\u2026", error.message)
    value = error.instance
    if message != error.message and isinstance(value, str) and repr(value) in error.message:
        message += f" ({len(value)} character{'s' if len(value) != 1 else ''})"
    return message


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's JSON reads them, JSON has none."""
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, refused when no float holds it
    (``1e400``): the log stores finite numbers only, and such an input ended the whole
    reply with a server error where it should have been the tool's error (QA)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


_EXACT_MAX = 2**53  # the largest float below which every integer is one exactly


def _whole_numbers(name: str, schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with a top-level ``integer`` property given as a whole float (``2.0``,
    ``1e3``: JSON Schema's integers too, and what JSON encoders write) made an ``int``,
    so that a tool sees the type its schema names. ``2.0`` was refused by a tool that
    checks its types while ``1e3`` went through as ``1000.0`` (QA).

    A float past 2**53 is no exact integer (``1e30`` would be 10**30 plus some): a
    ``ToolError``, not a rounded value. A built-in tool's integers have a ``maximum``
    (``INT_ARG_MAX`` at most), so this reaches only a tool that names none (MCP)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return args
    fixed = dict(args)
    for key, value in args.items():
        prop = properties.get(key)
        kinds = prop.get("type") if isinstance(prop, dict) else None
        wanted = kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds)
        if wanted and isinstance(value, float) and value.is_integer():
            if abs(value) > _EXACT_MAX:
                raise ToolError(
                    f"invalid input for {name}: {key}: {value!r} is too large to be an exact "
                    f"integer (at most {_EXACT_MAX} as a number with a fraction or exponent)",
                    metadata={"input": args},
                )
            fixed[key] = int(value)
    return fixed


def _effective_timeout(item: Tool, timeout: float | None) -> float | None:
    if timeout is not None:
        return timeout
    if item.timeout is not None:
        return item.timeout
    value = getattr(settings, "FORGE_TOOL_TIMEOUT", DEFAULT_TIMEOUT)
    return None if value is None else float(value)


async def _call(item: Tool, args: dict[str, Any], ctx: ToolContext) -> Any:
    if inspect.iscoroutinefunction(item.function):
        result = await item.function(ctx, args)
    else:
        result = await asyncio.to_thread(item.function, ctx, args)
    # A sync callable may hand back an awaitable (a partial of a coroutine function,
    # an object with an async __call__): await it too.
    while inspect.isawaitable(result):
        result = await result
    return result


def _seconds(value: float) -> str:
    return f"{value:g}"


async def execute(
    tool: Tool, args: dict[str, Any], ctx: ToolContext, *, timeout: float | None = None
) -> ToolResult:
    """:func:`run_tool`, counted in ``forge_tool_calls`` / ``forge_tool_errors`` (by the
    tool's registered name: a bounded label; a name the model made up never gets here)."""
    try:
        result = await run_tool(tool, args, ctx, timeout=timeout)
    except ToolError:
        metrics.tool_called(tool.name, failed=True)
        raise
    metrics.tool_called(tool.name, failed=False)
    return result


async def run_tool(
    tool: Tool, args: dict[str, Any], ctx: ToolContext, *, timeout: float | None = None
) -> ToolResult:
    """Run ``tool`` with already-validated ``args``; every failure becomes :class:`ToolError`.

    ``timeout`` (seconds): None uses ``tool.timeout``, then
    ``settings.FORGE_TOOL_TIMEOUT`` (read now). An async tool is awaited; a sync
    one runs in a worker thread, which on timeout or cancellation is abandoned
    (it keeps running to completion; its result is dropped) while this call
    returns at once. A ``str`` result becomes ``ToolResult(output=...)``. The output
    is returned whole, however long: it is logged raw (the runtime stores one over
    ``FORGE_TOOL_OUTPUT_MAX_BYTES`` as a file), and only the model's projection
    truncates it (:mod:`forge.context.messages`). A
    result holding a NUL character (U+0000) or a lone surrogate (half a UTF-16 pair,
    from a tool or an MCP server that cut an emoji) anywhere is an error (the log
    stores neither); either in an error's text is shown as U+FFFD.
    Cancellation of the awaiting task propagates as :class:`asyncio.CancelledError`.
    """
    limit = _effective_timeout(tool, timeout)
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            result = await _call(tool, args, ctx)
    except ToolError as exc:
        raise _storable(exc) from None
    except TimeoutError as exc:
        if deadline.expired():
            assert limit is not None
            raise ToolError(
                f"tool {tool.name!r} timed out after {_seconds(limit)} s",
                metadata={"timeout": limit},
            ) from None
        raise _failure(tool, exc) from exc
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        # SystemExit and KeyboardInterrupt too: raised by a tool (argparse's
        # ``parser.error``, a script's ``sys.exit``), they are its failure. Let through,
        # they reached the event loop, which stopped serving without the process exiting.
        raise _failure(tool, exc) from exc

    if isinstance(result, str):
        result = ToolResult(output=result)
    elif not isinstance(result, ToolResult):
        raise ToolError(
            f"tool {tool.name!r} failed: it returned {type(result).__name__}, "
            "expected a ToolResult or a str",
            metadata={"exception": "TypeError"},
        )
    elif not isinstance(result.output, str):
        raise ToolError(
            f"tool {tool.name!r} failed: its ToolResult.output is "
            f"{type(result.output).__name__}, expected a str",
            metadata={"exception": "TypeError"},
        )
    stored = {"output": result.output, "title": result.title, "metadata": result.metadata}
    where = nul_path(stored, "result")
    if where is not None:
        raise ToolError(
            f"tool {tool.name!r} failed: {where} holds a NUL character (U+0000), which "
            "cannot be stored",
            metadata={"exception": "NulCharacter"},
        )
    where = surrogate_path(stored, "result")
    if where is not None:
        raise ToolError(
            f"tool {tool.name!r} failed: {where} holds a lone surrogate (U+D800-U+DFFF, "
            "half a UTF-16 pair), which is no text and cannot be stored",
            metadata={"exception": "LoneSurrogate"},
        )
    return result


def _failure(item: Tool, exc: BaseException) -> ToolError:
    kind = type(exc).__name__
    detail = _shown(_truncate(str(exc), MAX_ERROR_CHARS))
    said = f"{kind}: {detail}" if detail else kind
    return ToolError(f"tool {item.name!r} failed: {said}", metadata={"exception": kind})
