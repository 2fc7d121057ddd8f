"""The page's own repairs: a seq gap filled from ``/events/``, and a hole in a part's
text filled by asking the socket for a snapshot. The server never produces either
on a healthy loopback, so the tests make the page lose what it had."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import ChatPage

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

OpenPage = Callable[..., ChatPage]


def test_a_seq_gap_is_filled_from_the_events_api(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page()
    chat.login()
    chat.new_session()
    chat.send("one two three")
    chat.wait_reply_done()
    page = chat.page
    page.locator("#abort-button:disabled").wait_for()
    result = page.evaluate(
        """async () => {
            const view = window.forgeChat.view;
            const head = view.lastSeq;
            const url = `/api/sessions/${view.id}/events/?after=${head - 1}`;
            const last = (await (await fetch(url)).json()).results[0];
            // Forget the last three events, then receive the last one again: a gap.
            view.lastSeq = head - 3;
            view.enqueue({ kind: "event", ...last });
            await view.queue;
            return { head, lastSeq: view.lastSeq, gapsFilled: view.stats.gapsFilled };
        }"""
    )
    assert result["lastSeq"] == result["head"]
    assert result["gapsFilled"] == 2
    # Re-applied by id: nothing doubled.
    assert page.locator(".message").count() == 2
    assert chat.assistant().locator(".part-text .markdown").inner_text() == "one two three"
    chat.assert_clean()


def test_a_hole_in_streamed_text_is_repaired_by_a_snapshot(
    chat_page: OpenPage, alice: Any, agents: Any
) -> None:
    chat = chat_page(FORGE_ECHO_DELAY="0.1")
    chat.login()
    chat.new_session()
    prompt = " ".join(f"w{i:03d}" for i in range(80))
    chat.send(prompt)
    page = chat.page
    streaming = chat.assistant().locator('.part-text[data-streaming="true"] .markdown')
    streaming.filter(has_text="w010").wait_for()
    # Lose the text so far: the next delta's offset is past what the page has.
    page.evaluate(
        """() => {
            const view = window.forgeChat.view;
            const rec = [...view.parts.values()].find(
                (r) => r.message.info.role === "assistant" && r.part.type === "text");
            rec.part.text = "w000";
            rec.len = 4;
        }"""
    )
    streaming.filter(has_text="w020").wait_for()
    assert chat.stats()["snapshotRequests"] >= 1
    # Repaired while still streaming: a longer prefix of the prompt than was kept.
    text = streaming.inner_text()
    assert prompt.startswith(text)

    message = chat.wait_reply_done()
    assert message.locator(".part-text .markdown").inner_text() == prompt
    chat.assert_clean()
