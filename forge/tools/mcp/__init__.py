"""MCP client tools: the tools of Model Context Protocol servers as Forge tools.

* :mod:`.spec`: the ``mcpServers`` shape (stdio ``command``/``args``/``env``,
  streamable HTTP ``url``/``headers``), checked, and its redaction;
* :mod:`.masking`: the secrets of an argument list, a URL or any text, masked;
* :mod:`.connection`: one connection per server and process, on a private loop;
* :mod:`.adapter`: an MCP tool as a :class:`~forge.tools.base.Tool` named
  ``<server>_<tool>``, and a call's result as a ``ToolResult``.
"""

from __future__ import annotations

from .adapter import Listing, alist_tools, convert, list_tools, will_wait
from .connection import close_all
from .spec import McpSpecError, ServerSpec, merged, parse_servers, redacted, with_secrets_kept

__all__ = [
    "Listing",
    "McpSpecError",
    "ServerSpec",
    "alist_tools",
    "close_all",
    "convert",
    "list_tools",
    "merged",
    "parse_servers",
    "redacted",
    "will_wait",
    "with_secrets_kept",
]
