"""Tools: the registry, preparing and executing a call, and the workspace tools.

Importing this package registers the built-in workspace tools (``list_files``,
``read_file``, ``write_file``, ``edit_file``), the memory tools (``memory_search``,
``memory_read``) and the recall tools (``history_search``, ``history_read``).
"""

from __future__ import annotations

from . import memory, recall, workspace  # noqa: F401 - register the file, memory, recall tools
from .base import Tool, ToolContext, ToolError, ToolFile, ToolFunction, ToolResult
from .execute import execute, prepare_call
from .registry import all_tools, get_tool, temporary_tools, tool, tool_specs
from .sandbox import resolve_in_workspace, workspace_path
from .snapshots import EMPTY_HASH, Snapshot, changed_files, snapshot

__all__ = [
    "EMPTY_HASH",
    "Snapshot",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolFile",
    "ToolFunction",
    "ToolResult",
    "all_tools",
    "changed_files",
    "execute",
    "get_tool",
    "prepare_call",
    "resolve_in_workspace",
    "snapshot",
    "temporary_tools",
    "tool",
    "tool_specs",
    "workspace_path",
]
