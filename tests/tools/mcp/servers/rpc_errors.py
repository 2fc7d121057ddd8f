"""An MCP stdio server written by hand (JSON-RPC lines, no SDK) whose tools answer
``tools/call`` with JSON-RPC errors, as a server may: FastMCP turns every exception of
a tool into an ``isError`` result, so it cannot send these.

* ``server_error``: code -32000 (JSON-RPC's "server error" range; the SDK's own code for
  a connection it saw close is the same number);
* ``refused``: code 32600 (the SDK's own code for an HTTP session the server forgot),
  after appending a byte to the file named by the first argument: how often it ran;
* ``pid``: this process's id (a restart changes it);
* ``malformed``: a result the SDK cannot parse (a content item of an unknown type),
  quoting the ``RPC_TOKEN`` of its env, as a server echoing its credentials would.
"""

from __future__ import annotations

import json
import os
import sys

COUNTER = sys.argv[1]
EMPTY = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "server_error", "description": "fails with -32000", "inputSchema": EMPTY},
    {"name": "refused", "description": "fails with 32600", "inputSchema": EMPTY},
    {"name": "pid", "description": "the process id", "inputSchema": EMPTY},
    {"name": "malformed", "description": "an unparsable result", "inputSchema": EMPTY},
]


def answer(request_id: object, **body: object) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, **body}) + "\n")
    sys.stdout.flush()


def call(request_id: object, name: str) -> None:
    if name == "server_error":
        answer(request_id, error={"code": -32000, "message": "server side failure"})
    elif name == "refused":
        with open(COUNTER, "a") as counter:
            counter.write("x")
        answer(request_id, error={"code": 32600, "message": "quota exceeded"})
    elif name == "malformed":
        token = os.environ.get("RPC_TOKEN", "")
        answer(request_id, result={"content": [{"type": "txt", "text": token}]})
    else:
        text = f"pid {os.getpid()}"
        answer(request_id, result={"content": [{"type": "text", "text": text}], "isError": False})


for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue  # a notification
    if method == "initialize":
        answer(
            request_id,
            result={
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "rpc-errors", "version": "1"},
            },
        )
    elif method == "tools/list":
        answer(request_id, result={"tools": TOOLS})
    elif method == "tools/call":
        call(request_id, message["params"]["name"])
    else:
        answer(request_id, error={"code": -32601, "message": f"no method {method}"})
