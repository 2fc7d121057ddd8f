"""Tool approvals with the real ``ai`` package (tests/aisdk/node/client.test.mjs under
daphne, as in :mod:`tests.aisdk.test_node_client`): a rule asks before ``list_files``
runs; ai 6 and 7 receive the approval request, answer it with
``addToolApprovalResponse`` (``sendAutomaticallyWhen``
``lastAssistantMessageIsCompleteWithApprovalResponses``) and read the rest of the same
reply, the tool's output or its denial; ai 5, which has no approvals, sees the call
waiting with its input and no error. The log is checked afterwards: one answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live import LiveServer

from .test_node_client import client_env, node_client, run_node_test, stored_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
__all__ = ["node_client"]  # the session's npm install, shared with test_node_client
PROMPT = "/tool list_files {}"


def tool_state(chat_id: str) -> dict[str, Any]:
    reply = stored_reply(chat_id)
    return next(p for p in reply["parts"] if p["type"] == "tool")["state"]


@pytest.mark.parametrize("version", ["ai6", "ai7"])
def test_add_tool_approval_response_approves_and_the_reply_finishes(
    node_client: Path, asking: LiveServer, user, token, version
):
    chat_id = f"approve{version}"
    env = client_env(asking, token, chat_id, PROMPT)
    run_node_test(node_client, version, "approval", APPROVE="1", REASON="", **env)
    reply = stored_reply(chat_id)
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"] is None
    state = tool_state(chat_id)
    assert state["status"] == "completed"
    assert state["metadata"]["approval"]["approved"] is True


@pytest.mark.parametrize("version", ["ai6", "ai7"])
def test_add_tool_approval_response_denies_with_the_reason(
    node_client: Path, asking: LiveServer, user, token, version
):
    chat_id = f"deny{version}"
    env = client_env(asking, token, chat_id, PROMPT)
    run_node_test(node_client, version, "approval", APPROVE="0", REASON="not today", **env)
    state = tool_state(chat_id)
    assert state["status"] == "error"
    assert state["metadata"]["denied"] is True
    assert stored_reply(chat_id)["info"]["completed_at"] is not None


def test_ai5_sees_the_call_waiting_and_no_error(node_client: Path, asking: LiveServer, user, token):
    chat_id = "waitai5"
    run_node_test(node_client, "ai5", "waiting", **client_env(asking, token, chat_id, PROMPT))
    assert tool_state(chat_id)["status"] == "awaiting-approval"
    assert stored_reply(chat_id)["info"]["completed_at"] is None
