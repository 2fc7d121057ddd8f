"""The README's production set-up, run for real (issue 17, static files).

``forge.settings.production`` (``DEBUG`` always off) behind a TLS-terminating proxy
(``FORGE_SECURE_PROXY_SSL_HEADER=1``; the test sends ``X-Forwarded-Proto: https``),
served by daphne, which on the server stack acts as the row-level-security
application role (``tests.live``). Without ``collectstatic`` it refuses to start with
a clear message (it used to start and answer 500 on every page); after it, it
serves the login page, the chat page and the admin, with their hashed static files.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import ROOT, daphne, server_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

REAL_KEY = "k3y-" + "x1y2z3" * 12


def production(static_root: Path) -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "forge.settings.production",
        "FORGE_SECRET_KEY": REAL_KEY,
        "FORGE_ALLOWED_HOSTS": "127.0.0.1",
        "FORGE_SECURE_PROXY_SSL_HEADER": "1",
        "FORGE_STATIC_ROOT": str(static_root),
    }


def collectstatic(static_root: Path) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=server_env(**production(static_root)),
        check=True,
        timeout=120,
    )


class Browser:
    """Just enough of a browser behind TLS: the proxy's header, and cookies sent by hand
    (they are ``Secure``, and the test speaks plain HTTP to daphne)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookies: dict[str, str] = {}
        self.client = httpx.Client(base_url=url, timeout=30, follow_redirects=False)

    def headers(self) -> dict[str, str]:
        headers = {"X-Forwarded-Proto": "https"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        return headers

    def remember(self, response: httpx.Response) -> httpx.Response:
        for line in response.headers.get_list("set-cookie"):
            name, _, rest = line.partition("=")
            self.cookies[name.strip()] = rest.split(";", 1)[0]
        return response

    def get(self, path: str) -> httpx.Response:
        return self.remember(self.client.get(path, headers=self.headers()))

    def post(self, path: str, data: dict[str, str]) -> httpx.Response:
        origin = "https://" + self.url.split("://", 1)[1]
        headers = {**self.headers(), "Origin": origin, "Referer": origin + path}
        return self.remember(self.client.post(path, data=data, headers=headers))


def test_production_refuses_to_start_without_collected_static_files(tmp_path: Path, agents: Any):
    with pytest.raises(RuntimeError) as refused, daphne(tmp_path, **production(tmp_path / "none")):
        pass
    assert "static files are not collected" in str(refused.value)
    assert "collectstatic" in str(refused.value)


def test_the_deploy_check_reports_missing_static_files(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT,
        env=server_env(**production(tmp_path / "none")),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "forge.E001" in result.stderr


def test_after_collectstatic_production_serves_the_pages_and_the_admin(
    tmp_path: Path, agents: Any, user: Any, settings: Any
):
    # Hashed the way the production server checks it (the suite's own hasher is MD5).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    user.set_password("pw-alice-123")
    user.is_staff = user.is_superuser = True
    user.save()
    static_root = tmp_path / "static"
    collectstatic(static_root)
    with daphne(tmp_path, **production(static_root)) as server:
        browser = Browser(server.url)
        login = browser.get("/login/")
        assert login.status_code == 200
        for asset in re.findall(r'(?:href|src)="(/static/[^"]+)"', login.text):
            assert re.search(r"\.[0-9a-f]{12}\.", asset), asset  # the manifest's hashed name
            assert browser.get(asset).status_code == 200, asset
        assert "csrftoken" in browser.cookies
        logged_in = browser.post(
            "/login/",
            {
                "username": user.username,
                "password": "pw-alice-123",
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
        )
        assert logged_in.status_code == 302, logged_in.text[:500]
        chat = browser.get("/")
        assert chat.status_code == 200
        assert "Content-Security-Policy" in chat.headers
        admin = browser.get("/admin/")
        assert admin.status_code == 200
        assert "Forge administration" in admin.text
        # The API answers JSON whatever a client accepts: an error asked for as HTML
        # was DRF's browsable page (QA: malformed JSON must be a JSON 400).
        html = {"X-Forwarded-Proto": "https", "Accept": "text/html,*/*;q=0.8"}
        for answer in (
            browser.client.get("/api/sessions/", headers=html),
            browser.client.post(
                "/api/sessions/",
                content=b'{"title":',
                headers={**browser.headers(), **html, "Content-Type": "application/json"},
            ),
        ):
            assert answer.status_code in (400, 401, 403), answer.text[:300]
            assert answer.headers["Content-Type"].startswith("application/json"), answer.text[:300]
