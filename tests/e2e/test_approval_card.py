"""A tool call awaiting approval on the chat page, in Chromium against a real daphne:
the card shows the call's input with Allow and Deny; Allow runs the tool and the reply
finishes on the page; Deny (with a reason) ends the call denied and the model is told
the reason. axe-core finds no WCAG 2 A/AA violation on the waiting card.

The server's rules come from ``FORGE_TOOL_APPROVAL`` (``list_files`` asks); the
offline echo model calls the tool for ``/tool list_files {}`` and reports its result
in the next step."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessions import selectors
from sessions.models import Session

from .conftest import ChatPage
from .test_first_screen import axe_violations

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

OpenPage = Callable[..., ChatPage]
ASK = json.dumps({"list_files": "ask"})


def stored_tool(session_id: str) -> dict[str, Any]:
    session = Session.objects.get(pk=session_id)
    page = selectors.message_page(tenant=session.tenant, session_id=session.pk, limit=10)
    reply = page.items[-1]
    return next(part for part in reply["parts"] if part["type"] == "tool")


def waiting_card(chat: ChatPage) -> Any:
    card = chat.page.locator('.message-assistant .part-tool[data-status="awaiting-approval"]')
    card.wait_for()
    return card


def test_allow_on_the_card_runs_the_tool_and_the_reply_finishes(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page(FORGE_TOOL_APPROVAL=ASK)
    chat.login()
    session_id = chat.new_session()
    chat.send("/tool list_files {}")

    card = waiting_card(chat)
    assert card.locator(".tool-name").inner_text() == "list_files"
    assert card.locator(".tool-input").get_attribute("open") is not None  # what is asked
    assert card.locator(".approval-label").inner_text() == "Waiting for your approval"
    # The turn is suspended: the reply stays open, and the composer is usable again.
    assert chat.assistant().get_attribute("data-state") == "streaming"
    assert stored_tool(session_id)["state"]["status"] == "awaiting-approval"
    chat.wait_until(lambda: chat.page.locator("#send-button").is_enabled())

    group = chat.page.get_by_role("group", name="Approve the call to list_files")
    group.get_by_role("button", name="Allow").click()

    message = chat.wait_reply_done()
    assert message.get_attribute("data-state") == "done"
    tool = message.locator(".part-tool")
    assert tool.get_attribute("data-status") == "completed"
    assert tool.locator(".approval-outcome").inner_text() == "Allowed"
    assert tool.get_by_role("button", name="Allow").count() == 0
    assert message.locator(".part-text .markdown").inner_text().startswith("The tool returned")
    stored = stored_tool(session_id)["state"]
    assert stored["status"] == "completed"
    assert stored["metadata"]["approval"]["approved"] is True
    chat.assert_clean()


def test_deny_with_a_reason_ends_the_call_denied_and_the_model_sees_why(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page(FORGE_TOOL_APPROVAL=ASK)
    chat.login()
    session_id = chat.new_session()
    chat.send("/tool list_files {}")

    card = waiting_card(chat)
    card.get_by_label("Reason to deny (optional)").fill("not this folder")
    card.get_by_role("button", name="Deny").click()

    message = chat.wait_reply_done()
    tool = message.locator(".part-tool")
    assert tool.get_attribute("data-status") == "error"
    assert "not this folder" in tool.locator(".approval-outcome").inner_text()
    assert "not this folder" in message.locator(".part-text .markdown").inner_text()
    stored = stored_tool(session_id)["state"]
    assert stored["status"] == "error"
    assert stored["metadata"]["denied"] is True
    chat.assert_clean()


def test_abort_ends_a_reply_that_waits_for_an_approval(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """A QA finding: while a reply waited for an approval, Abort was greyed out, though
    the server ends such a reply on an abort. It is enabled, and says what it waits
    for."""
    chat = chat_page(FORGE_TOOL_APPROVAL=ASK)
    chat.login()
    session_id = chat.new_session()
    chat.send("/tool list_files {}")
    waiting_card(chat)
    abort = chat.page.locator("#abort-button")
    chat.wait_until(abort.is_enabled)
    # The card is drawn from the part's event; the line under the prompt says "Working…"
    # until the server's session.status (idle: the turn waits) follows it. On a loaded
    # CI pass that came after the first read (stop 44), so wait for it.
    status = chat.page.locator("#turn-status")
    chat.wait_until(lambda: "approval" in status.inner_text())
    assert abort.is_enabled()
    abort.click()
    message = chat.wait_reply_done()
    assert message.locator(".part-tool").get_attribute("data-status") == "error"
    assert stored_tool(session_id)["state"]["status"] == "error"
    chat.wait_until(lambda: not abort.is_enabled())
    chat.assert_clean()


def test_enter_in_the_reason_denies_and_focus_goes_to_the_prompt(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """QA (LOW): Enter in the reason box did nothing, and after Allow or Deny the focus
    fell to <body> (the card is drawn anew), so a keyboard user started over. It goes
    to the prompt box once the answer is in."""
    chat = chat_page(FORGE_TOOL_APPROVAL=ASK)
    chat.login()
    session_id = chat.new_session()
    chat.send("/tool list_files {}")
    card = waiting_card(chat)
    reason = card.get_by_label("Reason to deny (optional)")
    reason.fill("keyboard says no")
    reason.press("Enter")
    message = chat.wait_reply_done()
    tool = message.locator(".part-tool")
    assert "keyboard says no" in tool.locator(".approval-outcome").inner_text()
    assert stored_tool(session_id)["state"]["metadata"]["denied"] is True
    assert chat.page.evaluate("() => document.activeElement.id") == "prompt"
    chat.assert_clean()


def test_axe_finds_no_violation_on_a_waiting_card(
    chat_page: OpenPage, alice: Any, agents: Any, axe_script: Path
) -> None:
    # The page's CSP refuses inline scripts, and Playwright injects axe inline.
    chat = chat_page({"bypass_csp": True}, FORGE_TOOL_APPROVAL=ASK)
    chat.login()
    chat.new_session()
    chat.send("/tool list_files {}")
    waiting_card(chat)
    assert axe_violations(chat, axe_script) == []


def test_a_card_past_its_expiry_asks_no_more(chat_page: OpenPage, alice: Any, agents: Any) -> None:
    """QA (LOW): past ``expires_at`` the card still offered Allow and Deny until the
    server's sweep denied the call, and a click then got a 409 the page did not show.
    The card is drawn again when the call expires (the janitor here sweeps only once a
    minute, so the page alone says it)."""
    chat = chat_page(FORGE_TOOL_APPROVAL=ASK, FORGE_APPROVAL_TIMEOUT="4", FORGE_LEASE_SECONDS="60")
    chat.login()
    chat.new_session()
    chat.send("/tool list_files {}")
    card = waiting_card(chat)
    assert card.locator(".approval-allow").is_enabled()
    card.locator(".approval-expired").wait_for(timeout=15_000)
    assert card.locator(".approval-expired").inner_text() == "Expired: the call will be denied"
    assert card.locator(".approval-allow").count() == 0
    chat.assert_clean()
