"""The chat page's first screen, a phone-sized screen, and axe-core's WCAG 2 A/AA rules,
in a real browser against a real daphne.

* After login the page is a new chat, ready to type: the prompt box has focus and
  the first message creates the session.
* At 390 x 844 the prompt box, Send and Abort are on screen and work; the session
  list is collapsed behind a button (``aria-expanded`` / ``aria-controls``).
* axe-core (pinned in ``tests/e2e/axe/package.json``, from the npm registry) finds
  no violation of the ``wcag2a``, ``wcag2aa``, ``wcag21a``, ``wcag21aa`` rules on the
  login page, the first screen and a chat with a tool call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessions.models import Message, Session

from .conftest import ChatPage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

OpenPage = Callable[..., ChatPage]
PHONE = {"width": 390, "height": 844}
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def focused_id(chat: ChatPage) -> str:
    return str(chat.page.evaluate("document.activeElement?.id ?? ''"))


def test_the_first_screen_takes_a_prompt_without_a_click(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page()
    chat.login()
    page = chat.page
    assert chat.view_id() is None
    assert page.locator("#session-title").inner_text() == "New chat"
    assert focused_id(chat) == "prompt"
    assert not Session.objects.exists()  # nothing is created before the first message

    page.keyboard.type("hello first screen")
    page.keyboard.press("Enter")
    message = chat.wait_reply_done()
    assert message.locator(".part-text .markdown").inner_text() == "hello first screen"
    session = Session.objects.get()
    assert chat.view_id() == session.pk
    assert page.url.endswith(f"#/s/{session.pk}")
    assert page.locator(".message-user .plain-text").inner_text() == "hello first screen"
    assert page.locator(".session-item").count() == 1
    assert focused_id(chat) == "prompt"  # ready for the next one
    # The end is announced in the status line, a live region (QA: "Working…", then
    # nothing for a screen reader's user).
    status = page.locator("#turn-status")
    chat.wait_until(lambda: status.inner_text() == "Reply ended.")
    assert status.get_attribute("role") == "status"
    chat.assert_clean()


def test_back_after_the_first_message_is_the_first_screen_again(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """QA (MEDIUM): Back after a new chat's first message changed the address to the
    first screen's, but the chat stayed on screen, and the next message went into it.
    The tab's title says which chat is open."""
    chat = chat_page()
    chat.login()
    page = chat.page
    page.keyboard.type("the first chat")
    page.keyboard.press("Enter")
    chat.wait_reply_done()
    first = Session.objects.get()
    assert page.title().endswith(" · Forge")  # "Untitled", or the title given it
    page.go_back()
    page.wait_for_function("() => window.forgeChat.view === null")
    assert page.locator("#session-title").inner_text() == "New chat"
    assert page.locator("#message-list > *").count() == 0
    assert page.title() == "Forge"
    page.locator("#prompt").fill("a second chat")
    page.keyboard.press("Enter")
    chat.wait_reply_done()
    assert Session.objects.count() == 2
    second = Session.objects.exclude(pk=first.pk).get()
    assert chat.view_id() == second.pk
    assert Message.objects.filter(session=first).count() == 2  # nothing added to it
    page.go_back()  # the first screen again
    page.wait_for_function("() => window.forgeChat.view === null")
    chat.assert_clean()


def test_a_refused_first_message_leaves_no_session_behind(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """QA (LOW): a first message refused (here: the month's budget is used up) left an
    empty "Untitled" session in the list, the page on it. The session made for it goes,
    and the page is the first screen again, the text in the box and the reason shown."""
    from forge.usage.services import set_budget

    set_budget(tenant=alice.tenants.get(), monthly_tokens=1)
    from forge.usage.services import record_reply
    from sessions.services import create_session
    from tests.usage.helpers import reply

    spent = create_session(user=alice, title="spent")
    _opened, done = reply(spent, steps=[{"tokens": {"input": 5, "output": 0}, "cost": 0}])
    record_reply(session=spent, info=done)
    chat = chat_page()
    chat.login()
    page = chat.page
    page.keyboard.type("over budget")
    page.keyboard.press("Enter")
    banner = page.locator("#error-text")
    chat.wait_until(lambda: "monthly budget" in banner.inner_text())
    chat.wait_until(lambda: Session.objects.count() == 1)  # the spent one alone
    chat.wait_until(lambda: chat.view_id() is None)
    assert page.locator("#prompt").input_value() == "over budget"
    assert "#/s/" not in page.url
    assert page.locator(".session-item").count() == 1
    assert page.locator("#session-title").inner_text() == "New chat"


def in_viewport(chat: ChatPage, selector: str) -> bool:
    box = chat.page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not rendered"
    return bool(
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= PHONE["width"]
        and box["y"] + box["height"] <= PHONE["height"]
    )


def test_on_a_phone_every_control_is_on_screen_and_works(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page({"viewport": PHONE, "has_touch": True}, FORGE_ECHO_DELAY="0.05")
    chat.login()
    page = chat.page
    toggle = page.locator("#sidebar-toggle")
    # The session list is collapsed behind its button; the chat has the screen.
    assert toggle.get_attribute("aria-controls") == "sidebar"
    assert toggle.get_attribute("aria-expanded") == "false"
    assert not page.locator("#sidebar").is_visible()
    for selector in ("#sidebar-toggle", "#prompt", "#send-button", "#abort-button"):
        assert in_viewport(chat, selector), selector

    page.locator("#prompt").fill("a reply to stop " + " ".join(["word"] * 60))
    page.locator("#send-button").tap()
    page.locator('.message-assistant[data-state="streaming"]').wait_for()
    page.locator("#abort-button:enabled").wait_for()
    for selector in ("#prompt", "#send-button", "#abort-button"):
        assert in_viewport(chat, selector), selector
    page.locator("#abort-button").tap()
    message = chat.wait_reply_done()
    assert message.get_attribute("data-state") == "error"
    page.locator("#abort-button:disabled").wait_for()

    # The button opens the list (which leaves the composer on screen) and closes it.
    toggle.tap()
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.locator("#sidebar").is_visible()
    assert page.locator(".session-item").count() == 1
    assert in_viewport(chat, "#send-button")
    page.locator("#new-session").tap()  # a new chat takes the screen again
    chat.wait_until(lambda: toggle.get_attribute("aria-expanded") == "false")
    assert not page.locator("#sidebar").is_visible()
    chat.wait_connected()
    chat.send("second chat")
    assert chat.wait_reply_done().get_attribute("data-state") == "done"
    assert Session.objects.count() == 2
    chat.assert_clean()


def test_on_a_phone_the_open_chat_title_is_readable(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """QA (MEDIUM): on a phone the header's title row shrank to nothing beside the turn
    status and the connection badge ("Reply ended.", "Live"): a title showed as "T…",
    so nothing on the screen said which chat was open; and the rename form ran under
    them, its Save and Cancel covered by the status (a tap on Save hit "Reply ended.").
    What does not fit now wraps to a line of its own."""
    chat = chat_page({"viewport": PHONE})
    chat.login()
    page = chat.page
    chat.send("hello")
    chat.wait_reply_done()
    chat.wait_connected()
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Session title").fill("Trip plans")
    page.get_by_role("button", name="Save").click()
    title = page.locator("#session-title", has_text="Trip plans")
    title.wait_for()
    page.locator("#turn-status", has_text="Reply ended.").wait_for()
    width = title.evaluate("(h) => [h.scrollWidth, h.clientWidth]")
    assert width[0] <= width[1], f"the title is cut: {width}"
    for selector in (
        "#session-title",
        "#rename-button",
        "#delete-button",
        "#turn-status",
        "#connection",
    ):
        assert in_viewport(chat, selector), selector
    chat.assert_clean()


def axe_violations(chat: ChatPage, axe_script: Path) -> list[dict[str, Any]]:
    """axe-core's WCAG 2 A/AA violations on the page as it is now."""
    chat.page.add_script_tag(path=str(axe_script))
    found = chat.page.evaluate(
        """async (tags) => {
            const results = await axe.run(document, { runOnly: { type: "tag", values: tags } });
            return results.violations.map((v) => ({
                id: v.id,
                impact: v.impact,
                nodes: v.nodes.map((n) => ({ target: n.target, summary: n.failureSummary })),
            }));
        }""",
        WCAG_TAGS,
    )
    return list(found)


@pytest.mark.parametrize(
    "screen",
    [{"color_scheme": "light"}, {"viewport": PHONE, "color_scheme": "dark"}],
    ids=["desktop-light", "phone-dark"],
)
def test_axe_finds_no_wcag_violation_on_login_first_screen_and_a_tool_call(
    chat_page: OpenPage, alice: Any, agents: Any, axe_script: Path, screen: dict[str, Any]
) -> None:
    # The page's CSP refuses inline scripts, and Playwright injects axe inline.
    options: dict[str, Any] = {"bypass_csp": True, **screen}
    chat = chat_page(options)
    page = chat.page
    page.goto(f"{chat.server.url}/login/")
    assert axe_violations(chat, axe_script) == [], "login page"

    chat.login()
    assert axe_violations(chat, axe_script) == [], "first screen"

    chat.send('/tool write_file {"path": "a.txt", "content": "hi"}')
    message = chat.wait_reply_done()
    assert message.locator(".part-tool").get_attribute("data-status") == "completed"
    message.locator(".part-reasoning summary").click()  # opened details are checked too
    message.locator(".tool-input summary").click()
    assert axe_violations(chat, axe_script) == [], "a chat with a tool call"
