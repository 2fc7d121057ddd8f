"""Browser tests of the chat page: Playwright driving Debian's Chromium against a real
daphne (``tests.live.daphne``) that shares the test database.

Playwright's own browser download does not work here, so the tests use
``/usr/bin/chromium`` (``FORGE_CHROMIUM`` overrides the path). Without it they are
skipped locally and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI
from tests.live import LiveServer, daphne

CHROMIUM = Path(os.environ.get("FORGE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
USERNAME = "alice"  # the `user` fixture (see `alice`)
PASSWORD = "pw-alice-123"
# Playwright waits (milliseconds).
WAIT = 20_000

try:
    from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
    from playwright.sync_api import Error as PlaywrightError
except ImportError:  # pragma: no cover - the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"browser tests skipped: {reason}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if sync_playwright is None:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set FORGE_CHROMIUM)")
    # Playwright's sync API runs its event loop in a greenlet of this thread, so while
    # it is alive Django sees "a running loop" and refuses plain database calls from
    # the test (and its fixtures). They are not async; allow them while the browser
    # lives. (Pytest-playwright's documented advice for Django; the daphne
    # subprocess does not inherit DJANGO_* variables.)
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield from _launch()
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


def _launch() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
        except PlaywrightError as exc:
            _unavailable(f"Chromium at {CHROMIUM} does not start: {exc}")
        yield launched
        launched.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Start a daphne with extra environment (``serve(FORGE_ECHO_DELAY="0.2")``)."""
    with ExitStack() as stack:

        def start(**env: str) -> LiveServer:
            return stack.enter_context(daphne(tmp_path, **env))

        yield start


@pytest.fixture
def alice(user: Any) -> Any:
    """The ``user`` fixture, with a password hash the server understands.

    The test settings hash with MD5 (fast), which the server's settings do not know;
    PBKDF2 with few iterations is fast here and valid there (the server upgrades the
    hash at the first login)."""
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "e2e-salt-0123", iterations=1000)
    user.save(update_fields=["password"])
    return user


@dataclass
class ChatPage:
    """A browser tab on the chat page, with what it logged."""

    page: Page
    server: LiveServer
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def login(self, username: str = USERNAME, password: str = PASSWORD) -> None:
        self.page.goto(f"{self.server.url}/")
        self.page.wait_for_url(re.compile(r"/login/"))
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_url(f"{self.server.url}/")
        self.page.locator("#prompt").wait_for()

    def view_id(self) -> str | None:
        found = self.page.evaluate("window.forgeChat.view?.id ?? null")
        return None if found is None else str(found)

    def new_session(self) -> str:
        """Click "New chat"; the new session's id once the page is live on it."""
        before = self.view_id()
        self.page.locator("#new-session").click()
        self.wait_until(lambda: self.view_id() not in (None, before))
        self.wait_connected()
        return str(self.view_id())

    def wait_until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        # (page.wait_for_function would evaluate a string, which the page's CSP forbids.)
        waited = 0
        while not predicate():
            if waited >= timeout:
                raise AssertionError("timed out waiting for the page")
            self.page.wait_for_timeout(50)
            waited += 50

    def wait_connected(self) -> None:
        self.page.locator('#connection[data-state="open"]').wait_for(timeout=WAIT)

    def send(self, text: str) -> None:
        prompt = self.page.locator("#prompt")
        prompt.fill(text)
        prompt.press("Enter")

    def assistant(self, n: int = -1) -> Any:
        """The n-th assistant message (a Locator)."""
        return self.page.locator(".message-assistant").nth(n)

    def wait_reply_done(self, n: int = -1) -> Any:
        message = self.assistant(n)
        message.and_(self.page.locator('[data-state="done"], [data-state="error"]')).wait_for(
            timeout=WAIT
        )
        return message

    def stats(self) -> dict[str, int]:
        return dict(self.page.evaluate("({...window.forgeChat.view.stats})"))

    def assert_clean(self) -> None:
        """No uncaught error and no Content-Security-Policy violation in the page."""
        assert self.page_errors == []
        assert [e for e in self.console_errors if "Content Security Policy" in e] == []


@pytest.fixture
def chat_page(
    browser: Browser, serve: Callable[..., LiveServer]
) -> Iterator[Callable[..., ChatPage]]:
    """Open a tab on a fresh server: ``chat_page(FORGE_ECHO_DELAY="0.05")``; ``options``
    are Playwright's for the tab's context (``{"viewport": {...}}``)."""
    contexts = []

    def open_page(options: dict[str, Any] | None = None, **env: str) -> ChatPage:
        server = serve(**env)
        context = browser.new_context(**(options or {}))
        context.set_default_timeout(WAIT)
        contexts.append(context)
        page = context.new_page()
        chat = ChatPage(page=page, server=server)

        def on_console(message: ConsoleMessage) -> None:
            if message.type == "error":
                chat.console_errors.append(message.text)

        page.on("console", on_console)
        page.on("pageerror", lambda error: chat.page_errors.append(str(error)))
        return chat

    yield open_page
    for context in contexts:
        context.close()


AXE_DIR = Path(__file__).parent / "axe"


@pytest.fixture(scope="session")
def axe_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``axe.min.js`` of the axe-core pinned in ``tests/e2e/axe/package.json``, installed
    from the npm registry. Without npm or the registry the tests are skipped, and
    fail under ``CI=true``."""
    if shutil.which("npm") is None:
        _unavailable("npm is needed to install axe-core")
    where = tmp_path_factory.mktemp("axe")
    shutil.copy(AXE_DIR / "package.json", where / "package.json")
    install = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if install.returncode != 0:
        _unavailable(f"npm install axe-core failed: {install.stderr[-2000:]}")
    script = where / "node_modules" / "axe-core" / "axe.min.js"
    if not script.exists():
        _unavailable(f"axe-core installed no {script}")
    return script
