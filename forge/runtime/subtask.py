"""The ``task`` tool: a subtask run by a named agent in a child session."""

from __future__ import annotations

from typing import Any

from forge.tools import ToolContext, ToolError, ToolResult, tool


@tool(
    name="task",
    description=(
        "Hand a self-contained piece of work to another agent (for example 'explore' to look "
        "through the workspace). It runs in a child session; its final answer is returned."
    ),
    parameters={
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 1, "maxLength": 200},
            "prompt": {"type": "string", "minLength": 1},
            "agent": {"type": "string", "minLength": 1},
        },
        "required": ["description", "prompt", "agent"],
        "additionalProperties": False,
    },
    timeout=600,
)
async def task(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    if ctx.run_subtask is None:
        raise ToolError("subtasks cannot run here")
    return await ctx.run_subtask(args["agent"], args["prompt"], args["description"])
