"""``make cluster``'s script end to end, on the cluster of this folder's tests
(``conftest.cluster``: its own directory and ports): nginx in front of two daphnes, two
Redis shards, a PostgreSQL primary and replica. A chat goes through nginx over
WebSocket and SSE (cluster/smoke.py), and a second ``up`` sees it running. That
``down`` stops every process it started is checked by the fixture's teardown.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .conftest import ROOT, Cluster, pids

pytestmark = pytest.mark.postgres_only


def test_make_cluster_serves_a_chat_through_nginx(cluster: Cluster) -> None:
    out = cluster.up_output
    assert len(cluster.started) == 2 + 2 + 2 + 1  # daphnes, shards, primary + replica, nginx
    assert cluster.token
    assert f"{cluster.url}/" in out
    assert "make cluster-stop" in out

    assert "already running" in cluster.run("up")
    assert sorted(pids(cluster.directory)) == sorted(cluster.started)

    smoke = subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "smoke.py"), cluster.token, cluster.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    log = (cluster.directory / "nginx" / "access.log").read_text()
    assert " 101 " in log  # the WebSocket upgrade went through nginx
    upstreams = set(re.findall(r"upstream=(127\.0\.0\.1:\d+)", log))
    assert upstreams <= {f"127.0.0.1:{port}" for port in cluster.daphne_ports}


def _sign_in(cluster: Cluster, source: str, password: str) -> int:
    """Sign in as the demo user through nginx from the loopback address ``source``; the
    login page's status (302 signed in, 200 refused)."""
    import httpx

    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=20) as client:
        client.get(f"{cluster.url}/login/")
        answer = client.post(
            f"{cluster.url}/login/",
            data={
                "username": "demo",
                "password": password,
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
            },
            # What a client may claim: nginx passes on its own view of the address.
            headers={"Referer": f"{cluster.url}/login/", "X-Real-IP": "127.0.0.3"},
        )
        return answer.status_code


def test_failed_sign_ins_behind_nginx_lock_out_one_address_only(cluster: Cluster) -> None:
    """A QA finding: daphne saw nginx's address for every client, so five wrong
    passwords from anyone locked the user out for everyone (a sign-in lockout is one
    name from one address). The daphnes read the client's address from nginx's
    ``X-Real-IP``, which nginx sets and a client cannot."""
    for n in range(6):
        _sign_in(cluster, "127.0.0.2", f"wrong-{n}")
    assert _sign_in(cluster, "127.0.0.2", "demo") == 200  # locked out, there
    assert _sign_in(cluster, "127.0.0.3", "demo") == 302  # not from another address


def test_long_request_lines_through_nginx_get_daphnes_answers(cluster: Cluster) -> None:
    """A QA finding: nginx's default header buffers (8 KiB) refused requests of 8-16 KiB
    that daphne takes, and answered longer ones with its own HTML page instead of
    daphne's JSON 414."""
    import httpx

    url = f"{cluster.url}/api/sessions/"
    taken = httpx.get(url, params={"q": "x" * 12_000}, timeout=20)
    assert taken.status_code == 401  # the API's own answer: no token
    assert taken.json()["error"]["code"] == "not_authenticated"
    refused = httpx.get(url, params={"q": "x" * 20_000}, timeout=20)
    assert refused.status_code == 414
    assert refused.json()["error"]["code"] == "uri_too_long"
