"""derive_messages and the context blocks: what the model is sent, from the log alone."""

from forge.context import build_request, derive_messages
from sessions.projector import fold_context

T = {"start": "2026-11-30T00:00:00.000Z", "end": "2026-11-30T00:00:01.000Z"}


def part(kind, **fields):
    return {"id": f"prt_{kind}", "message_id": "m", "session_id": "s", "type": kind, **fields}


def tool(call_id, status, **state):
    return part("tool", call_id=call_id, tool="read_file", state={"status": status, **state})


USER = {
    "info": {"id": "m1", "role": "user"},
    "parts": [part("text", text="read a.txt", synthetic=False)],
}


def test_user_text_files_and_a_multi_step_reply():
    history = [
        {
            "info": {"id": "m1", "role": "user"},
            "parts": [
                part("text", text="look at these", synthetic=False),
                part("file", mime="text/plain", filename="a.txt", url="/media/a.txt"),
                part("text", text='<file name="a.txt">\nalpha\n</file>', synthetic=True),
                part("file", mime="image/png", filename="b.png", url="/media/b.png"),
                part("agent", name="build"),
            ],
        },
        {
            "info": {"id": "m2", "role": "assistant"},
            "parts": [
                part("step-start", snapshot="x"),
                part("reasoning", text="hmm", time=T),
                part("text", text="Reading.", time=T, synthetic=False),
                tool(
                    "c1",
                    "completed",
                    input={"path": "a.txt"},
                    output="alpha",
                    title="",
                    metadata={},
                    time=T,
                ),
                tool("c2", "error", input={"path": "z"}, error="no such file", metadata={}, time=T),
                part("step-finish", reason="tool-calls", snapshot="x", tokens={}, cost=0),
                part("step-start", snapshot="x"),
                part("text", text="Done.", time=T, synthetic=False),
                part("step-finish", reason="stop", snapshot="x", tokens={}, cost=0),
            ],
        },
    ]
    assert derive_messages(history) == [
        {
            "role": "user",
            "content": 'look at these\n\n<file name="a.txt">\nalpha\n</file>\n\n'
            "[attached file: b.png (image/png)]",
        },
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "z"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "alpha"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: no such file"},
        {"role": "assistant", "content": "Done."},
    ]


def test_an_assistant_message_with_no_parts_yet_is_not_sent():
    history = [USER, {"info": {"id": "m2", "role": "assistant"}, "parts": []}]
    assert derive_messages(history) == [{"role": "user", "content": "read a.txt"}]


def test_context_blocks_replace_by_kind_and_key_and_can_be_removed():
    blocks = fold_context(
        [
            {
                "blocks": [
                    {"kind": "system", "key": "agent", "text": "v1"},
                    {"kind": "tools", "key": "agent", "tools": []},
                ]
            },
            {"blocks": [{"kind": "system", "key": "agent", "text": "v2"}]},
            {"blocks": [{"kind": "dialog_history", "key": "memory", "text": "earlier: we met"}]},
            {"blocks": [{"kind": "tools", "key": "agent", "removed": True}]},
        ]
    )
    assert set(blocks) == {"system:agent", "dialog_history:memory"}
    request = build_request(blocks=blocks, history=[USER], model="echo")
    assert request.system == ["v2", "earlier: we met"]
    assert request.tools == []
    assert request.messages == [{"role": "user", "content": "read a.txt"}]


def test_the_request_carries_logged_tools_and_settings():
    blocks = fold_context(
        [
            {
                "blocks": [
                    {"kind": "system", "key": "agent", "text": "Be brief."},
                    {
                        "kind": "tools",
                        "key": "agent",
                        "tools": [
                            {
                                "name": "read_file",
                                "description": "d",
                                "parameters": {"type": "object"},
                            }
                        ],
                    },
                    {
                        "kind": "settings",
                        "key": "agent",
                        "model": "offline/echo",
                        "temperature": 0.3,
                    },
                ]
            }
        ]
    )
    request = build_request(blocks=blocks, history=[USER], model="echo")
    assert [t.name for t in request.tools] == ["read_file"]
    assert request.temperature == 0.3
    assert request.as_dict()["system"] == ["Be brief."]


def test_the_tools_and_settings_are_the_agents_blocks_whatever_came_first():
    """QA (LOW): the request took the *first* ``tools`` and ``settings`` blocks logged,
    of any key. The runtime sets only ``tools:agent`` / ``settings:agent`` (and
    ``model_of`` read ``settings:agent``), but an imported log whose first
    ``context.updated`` held ``{"kind": "tools", "key": "x", ...}`` offered the model
    that list on every later turn, the agent's own block set anew each turn ignored."""
    read = {"name": "read_file", "description": "d", "parameters": {"type": "object"}}
    bash = {"name": "bash", "description": "run anything", "parameters": {"type": "object"}}
    blocks = fold_context(
        [
            {
                "blocks": [
                    {"kind": "tools", "key": "x", "tools": [bash]},
                    {"kind": "settings", "key": "x", "temperature": 1.5},
                ]
            },
            {
                "blocks": [
                    {"kind": "tools", "key": "agent", "tools": [read]},
                    {"kind": "settings", "key": "agent", "model": "offline/echo"},
                ]
            },
        ]
    )
    request = build_request(blocks=blocks, history=[USER], model="echo")
    assert [t.name for t in request.tools] == ["read_file"]
    assert request.temperature is None
