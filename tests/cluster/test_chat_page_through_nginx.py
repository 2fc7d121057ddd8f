"""The chat page in a real browser (Playwright, Debian's Chromium; tests/e2e) through
the cluster's nginx (``conftest.cluster``): log in with the demo login ``make cluster``
printed, start a chat, send a prompt, and watch the reply stream in over the WebSocket
that nginx upgrades to one of the daphnes."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from .conftest import Cluster

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(300)]

WAIT = 30_000


def test_chat_page_streams_a_reply_through_nginx(cluster: Cluster, browser: Any) -> None:
    login = re.search(r"user '([^']+)'\s+password '([^']+)'", cluster.up_output)
    assert login, cluster.up_output
    context = browser.new_context()
    context.set_default_timeout(WAIT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        page.goto(f"{cluster.url}/")
        page.wait_for_url(re.compile(r"/login/"))
        page.get_by_label("Username").fill(login[1])
        page.get_by_label("Password").fill(login[2])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{cluster.url}/")
        page.locator("#prompt").wait_for()
        page.locator("#new-session").click()
        page.locator('#connection[data-state="open"]').wait_for()

        prompt = "hello through nginx " + " ".join(f"word{i:02d}" for i in range(30))
        page.locator("#prompt").fill(prompt)
        page.locator("#prompt").press("Enter")
        # The reply streams (offline/echo, a word every FORGE_ECHO_DELAY), then ends.
        page.locator('.message-assistant[data-state="streaming"]').wait_for()
        partial = page.locator(".message-assistant .part-text .markdown").last
        partial.wait_for()
        done = page.locator('.message-assistant[data-state="done"]').last
        done.wait_for()
        assert done.locator(".part-text .markdown").inner_text() == prompt
        assert errors == []
    finally:
        context.close()
    # nginx logs a WebSocket request when its connection ends, which the page's close
    # starts but does not wait for: look for the upgrade's line for a few seconds.
    upgraded = re.compile(r'"GET /ws/sessions/[^ ]+ HTTP/1.1" 101 ')
    access_log = cluster.directory / "nginx" / "access.log"
    deadline = time.monotonic() + 10
    while not upgraded.search(log := access_log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert upgraded.search(log), log[-2000:]
