"""The real ``ai`` package (5, 6 and 7, pinned in ``tests/aisdk/node/package.json`` and
installed from the npm registry) reads Forge's UI message stream under daphne. The tests
themselves are ``tests/aisdk/node/client.test.mjs`` under Node's own test runner
(``DefaultChatTransport`` sends, ``reconnectToStream`` resumes, ``readUIMessageStream``
folds, ``AbstractChat`` regenerates; each compares the client's message with Forge's
stored one); this module starts daphne with the model each needs, runs them for every
version, and checks the log afterwards.

Without Node or the registry the tests are skipped, and fail under ``CI=true``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.live import LiveServer, daphne
from tests.replies import paced, words

from .test_chat_routes import chat_history

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
    for name in ("package.json", "client.test.mjs"):
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


def run_node_test(where: Path, version: str, scenario: str, **env: str) -> str:
    """Run one scenario of client.test.mjs under ``node --test``; its assertions are the
    test. Returns the runner's report (TAP), shown in full when it fails."""
    done = subprocess.run(
        [
            "node",
            "--test",
            "--test-reporter=tap",
            f"--test-name-pattern=^{scenario}:",
            "client.test.mjs",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "AI": version, **env},
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "# pass 1" in report, report  # the scenario ran, and it alone
    return report


def stored_reply(chat_id: str) -> dict[str, Any]:
    return chat_history(chat_id)[-1]


def client_env(live: LiveServer, token: str, chat_id: str, prompt: str) -> dict[str, str]:
    return {"FORGE_URL": live.url, "FORGE_TOKEN": token, "CHAT_ID": chat_id, "PROMPT": prompt}


@pytest.fixture
def echo(tmp_path: Path, agents: Any) -> Any:
    with daphne(tmp_path, "echo", FORGE_ECHO_DELAY="0.001") as live:
        yield live


@pytest.mark.parametrize("version", VERSIONS)
def test_a_reply_with_reasoning_and_a_tool_call_ends_as_the_stored_message(
    node_client: Path, echo: LiveServer, user, token, version
):
    chat_id = f"node{version}"
    run_node_test(
        node_client, version, "reply", **client_env(echo, token, chat_id, "/tool list_files {}")
    )
    reply = stored_reply(chat_id)
    assert reply["info"]["completed_at"] is not None
    assert {p["type"] for p in reply["parts"]} >= {"reasoning", "text", "tool"}


@pytest.mark.parametrize("version", VERSIONS)
def test_chat_regenerate_replaces_the_last_reply_with_a_new_stored_one(
    node_client: Path, echo: LiveServer, user, token, version
):
    chat_id = f"regen{version}"
    run_node_test(
        node_client, version, "regenerate", **client_env(echo, token, chat_id, "say it again")
    )
    history = chat_history(chat_id)
    assert [item["info"]["role"] for item in history] == ["user", "assistant", "assistant"]
    prompt, old, new = history
    assert new["info"]["parent_id"] == old["info"]["parent_id"] == prompt["info"]["id"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_resume_mid_reply_ends_with_the_same_message(
    node_client: Path, tmp_path: Path, agents: Any, session, token, version
):
    script = tmp_path / "script.json"
    # A 12 s reply: the client leaves at its first text and reconnects 0.3 s later, well
    # before the end even on a loaded machine (a 6 s one ended first once, with a
    # benchmark loading both cores beside the suite: the first text came ~6.5 s in).
    script.write_text(json.dumps([paced(words(240), 0.05)] * 5))
    expected = "".join(words(240)).rstrip()
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        env = client_env(live, token, session.pk, "go")
        run_node_test(node_client, version, "resume", EXPECTED_TEXT=expected, **env)
    reply = stored_reply(session.pk)
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == [expected]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stop_ends_the_reply_as_aborted(
    node_client: Path, tmp_path: Path, agents: Any, session, token, version
):
    script = tmp_path / "script.json"
    # A 60 s reply: the client stops it at its first text, well before the end even on a
    # loaded CI machine (a 4 s one, then an 8 s one, once ended first: the stop got 409).
    script.write_text(json.dumps([paced(words(3000), 0.02)] * 5))
    with daphne(tmp_path, FORGE_MODEL="offline/script", FORGE_SCRIPT=str(script)) as live:
        run_node_test(node_client, version, "stop", **client_env(live, token, session.pk, "go"))
    reply = stored_reply(session.pk)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
