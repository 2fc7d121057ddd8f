"""The real ``ai`` package (5, 6 and 7, pinned in ``tests/aisdk/node/package.json`` and
installed from the npm registry) reads Forge's UI message stream under daphne:
``DefaultChatTransport`` sends, ``reconnectToStream`` resumes, ``readUIMessageStream``
folds; the message it ends with equals Forge's stored one.

Without Node or the registry the tests are skipped, and fail under ``CI=true``."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions import selectors
from sessions.models import Session
from tests.conftest import IN_CI
from tests.live import LiveServer, daphne
from tests.replies import paced, words

from .ui import expected_parts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
NODE_DIR = Path(__file__).parent / "node"
VERSIONS = ("ai5", "ai6", "ai7")


def _unavailable(why: str) -> None:
    if IN_CI:
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def node_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding chat.mjs with the pinned ``ai`` versions installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are needed for the AI SDK client tests")
    where = tmp_path_factory.mktemp("ai-sdk-client")
    for name in ("package.json", "chat.mjs", "regenerate.mjs"):
        shutil.copy(NODE_DIR / name, where / name)
    install = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if install.returncode != 0:
        _unavailable(f"npm install failed: {install.stderr[-2000:]}")
    return where


def run_client(where: Path, version: str, *args: str, script: str = "chat.mjs") -> dict[str, Any]:
    done = subprocess.run(
        ["node", script, version, *args], cwd=where, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def stored_reply(chat_id: str) -> dict[str, Any]:
    session = Session.objects.get(pk=chat_id)
    return list(selectors.iter_history(tenant=session.tenant, session_id=chat_id))[-1]


def ui_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The client's parts in the shape of ``expected_parts`` (its bookkeeping fields dropped)."""
    out = []
    for part in message["parts"]:
        if part["type"] in ("text", "reasoning"):
            out.append({"type": part["type"], "text": part["text"]})
        elif part["type"].startswith("tool-"):
            tool = {k: part[k] for k in ("type", "toolCallId", "input", "state")}
            tool.update({k: part[k] for k in ("output", "errorText") if k in part})
            out.append(tool)
        elif part["type"].startswith("data-"):
            out.append({k: part.get(k) for k in ("type", "id", "data")})
        else:
            out.append({"type": part["type"]})
    return out


@pytest.fixture
def echo(tmp_path: Path, agents: Any) -> Any:
    with daphne(tmp_path, "echo", FORGE_ECHO_DELAY="0.001") as live:
        yield live


@pytest.mark.parametrize("version", VERSIONS)
def test_a_reply_with_reasoning_and_a_tool_call_ends_as_the_stored_message(
    node_client: Path, echo: LiveServer, user, token, version
):
    chat_id = f"node{version}"
    result = run_client(node_client, version, echo.url, token, chat_id, "/tool list_files {}")
    assert result["errors"] == []
    reply = stored_reply(chat_id)
    message = result["message"]
    assert message["id"] == reply["info"]["id"]
    assert message["role"] == "assistant"
    assert ui_parts(message) == expected_parts(reply)
    kinds = [p["type"] for p in message["parts"]]
    assert {"reasoning", "text", "tool-list_files"} <= set(kinds)


@pytest.mark.parametrize("version", VERSIONS)
def test_chat_regenerate_replaces_the_last_reply_with_a_new_stored_one(
    node_client: Path, echo: LiveServer, user, token, version
):
    chat_id = f"regen{version}"
    result = run_client(
        node_client, version, echo.url, token, chat_id, "say it again", script="regenerate.mjs"
    )
    assert result["errors"] == []
    session = Session.objects.get(pk=chat_id)
    history = list(selectors.iter_history(tenant=session.tenant, session_id=chat_id))
    assert [item["info"]["role"] for item in history] == ["user", "assistant", "assistant"]
    prompt, old, new = history
    assert new["info"]["parent_id"] == old["info"]["parent_id"] == prompt["info"]["id"]
    sent, regenerated = result["sent"], result["regenerated"]
    # (The client names its user message itself; a reply carries the stored id.)
    assert [(m["role"], m["id"]) for m in sent[1:]] == [("assistant", old["info"]["id"])]
    # The client dropped the old reply and built the new one from the stream.
    assert [m["role"] for m in regenerated] == ["user", "assistant"]
    assert regenerated[0] == sent[0]
    assert regenerated[1]["id"] == new["info"]["id"]
    assert ui_parts(regenerated[-1]) == expected_parts(new)
    assert {"type": "text", "text": "say it again"} in ui_parts(regenerated[-1])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_resume_mid_reply_ends_with_the_same_message(
    node_client: Path, tmp_path: Path, agents: Any, session, token, version
):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([paced(words(40), 0.05)] * 5))
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        assert run_client(node_client, version, live.url, token, session.pk, "", "resume") == {
            "resumed": None
        }
        started = threading.Event()

        def prompt() -> None:  # a client that leaves after the first chunks
            with (
                httpx.Client(timeout=30) as client,
                client.stream(
                    "POST",
                    f"{live.url}/api/chat",
                    headers={"Authorization": f"Token {token}"},
                    json={
                        "id": session.pk,
                        "trigger": "submit-message",
                        "messages": [
                            {"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]}
                        ],
                    },
                ) as response,
            ):
                for line in response.iter_lines():
                    if "text-delta" in line:
                        started.set()
                        return

        thread = threading.Thread(target=prompt)
        thread.start()
        assert started.wait(20)
        thread.join()
        time.sleep(0.3)  # some of the reply streamed meanwhile
        result = run_client(node_client, version, live.url, token, session.pk, "", "resume")
    assert result["errors"] == []
    reply = stored_reply(session.pk)
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None
    message = result["message"]
    assert message["id"] == reply["info"]["id"]
    assert ui_parts(message) == expected_parts(reply)
    texts = [p for p in message["parts"] if p["type"] == "text"]
    assert [t["text"] for t in texts] == ["".join(words(40)).rstrip()]  # no duplicate


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stop_ends_the_reply_as_aborted(
    node_client: Path, tmp_path: Path, agents: Any, session, token, version
):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([paced(words(200), 0.02)] * 5))
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        result = run_client(node_client, version, live.url, token, session.pk, "go", "stop")
    assert result["errors"] == []
    assert result["types"][-1] == "abort"
    reply = stored_reply(session.pk)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    message = result["message"]
    assert message["id"] == reply["info"]["id"]
    assert ui_parts(message) == expected_parts(reply)
