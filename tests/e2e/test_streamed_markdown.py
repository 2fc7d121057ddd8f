"""Model Markdown in a real browser: a streamed reply keeps its finished blocks (and a
selection in them), and what it ends as is the whole text rendered at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import ChatPage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

OpenPage = Callable[..., ChatPage]

# The reply's body as the page drew it, and the same text drawn at once, both
# serialized by the browser.
SAME_AS_WHOLE = """async (body, text) => {
    const { renderMarkdown } = await import("/static/forge/markdown.js");
    const whole = document.createElement("div");
    whole.innerHTML = renderMarkdown(text);
    return [body.innerHTML, whole.innerHTML];
}"""


def test_a_selection_in_a_finished_block_survives_the_stream(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    """A QA finding: every frame replaced the whole reply's HTML, so a selection in
    it was wiped at once (and a long reply made the page sluggish)."""
    chat = chat_page(FORGE_ECHO_DELAY="0.03")
    chat.login()
    chat.new_session()
    page = chat.page
    first = "The first paragraph, finished early."
    tail = " ".join(f"w{n}" for n in range(150))
    prompt = f"{first}\n\n- a list\n- of two\n\n{tail}"
    chat.send(prompt)
    body = chat.assistant().locator(".part-text .markdown")
    # The first paragraph is finished once the list has started on a complete line.
    body.locator("li", has_text="of two").wait_for()
    selected = body.evaluate(
        """(body) => {
            const p = body.querySelector("p");
            const range = document.createRange();
            range.selectNodeContents(p);
            getSelection().removeAllRanges();
            getSelection().addRange(range);
            window.__firstParagraph = p;
            return getSelection().toString();
        }"""
    )
    assert selected == first
    before = len(body.inner_text())
    chat.wait_until(lambda: len(body.inner_text()) > before + 60)  # many frames later
    assert chat.assistant().get_attribute("data-state") == "streaming"
    assert page.evaluate("getSelection().toString()") == first
    assert page.evaluate("window.__firstParagraph.isConnected") is True

    chat.wait_reply_done()
    drawn, whole = body.evaluate(SAME_AS_WHOLE, prompt)
    assert drawn == whole
    assert page.evaluate("getSelection().toString()") == first
    chat.assert_clean()


def test_backslash_escapes_and_a_wide_table(chat_page: OpenPage, alice: Any, agents: Any) -> None:
    """QA findings: "\\*not italic\\*" was italic with its backslashes shown, and a
    wide table squeezed its columns to a letter a line instead of scrolling."""
    chat = chat_page()
    chat.login()
    chat.new_session()
    columns = [f"heading{n:02d}" for n in range(14)]
    table = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)
    table += "\n| " + " | ".join(f"cell{n:02d}value" for n in range(len(columns))) + " |"
    chat.send(f"\\*not italic\\* but *this* is\n\n{table}")
    message = chat.wait_reply_done()
    body = message.locator(".part-text .markdown")
    paragraph = body.locator("p").first
    assert paragraph.inner_text() == "*not italic* but this is"
    assert paragraph.locator("em").all_inner_texts() == ["this"]

    found = body.locator("table").evaluate(
        """(table) => {
            const cell = table.querySelector("th");
            const line = parseFloat(getComputedStyle(cell).lineHeight) || 20;
            return {
                scrolls: table.scrollWidth > table.clientWidth + 1,
                inside: table.getBoundingClientRect().right
                    <= table.closest(".message").getBoundingClientRect().right + 1,
                lines: Math.round(cell.clientHeight / line),
            };
        }"""
    )
    assert found["scrolls"] is True
    assert found["inside"] is True
    assert found["lines"] <= 2, found
    chat.assert_clean()
