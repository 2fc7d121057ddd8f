"""``make run`` serves the app with the embedded defaults and prints the demo login."""

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.live import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.sqlite_only
@pytest.mark.timeout(240)
def test_make_run_serves_daphne_and_prints_the_demo_login(tmp_path):
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FORGE_", "DJANGO_", "DATABASE_URL", "REDIS_URL"))
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'forge.sqlite3'}"
    log = tmp_path / "make-run.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, log.read_text()
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/admin/login/", timeout=2)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.5)
        assert response.status_code == 200
        assert "Django administration" in response.text or "Forge" in response.text
        static = httpx.get(f"http://127.0.0.1:{port}/static/admin/css/base.css", timeout=5)
        assert static.status_code == 200
        output = log.read_text()
        assert "Forge demo login" in output
        assert f"Forge demo login: http://127.0.0.1:{port}/ " in output  # where it serves
        assert "user 'demo'" in output
        login = httpx.post(
            f"http://127.0.0.1:{port}/admin/login/",
            data={
                "username": "demo",
                "password": "demo",
                "next": "/admin/",
                "csrfmiddlewaretoken": response.cookies.get("csrftoken", ""),
            },
            cookies=response.cookies,
            headers={"Referer": f"http://127.0.0.1:{port}/admin/login/"},
            timeout=5,
        )
        assert login.status_code == 302, login.text[:500]
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
