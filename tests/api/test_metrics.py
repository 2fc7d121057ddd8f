"""``GET /metrics`` (issue 22): Prometheus text for the operator's scraper only, and its
counters move when the work they count happens."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.test_turns import text_reply, tool_reply

from .test_socket import backlog, finished, frames_until, socket, until_ack

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

TOKEN = "scrape-me-0123456789"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` as Prometheus' own parser reads it."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


@pytest.fixture
def metrics_token(settings):
    settings.FORGE_METRICS_TOKEN = TOKEN
    settings.FORGE_METRICS_ALLOW = []


def test_metrics_are_refused_without_the_token(client, settings, metrics_token):
    """A third-round finding: a missing or wrong token was 403; with a token configured
    it is 401 and says which scheme would be let in (RFC 6750)."""
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": TOKEN}):
        response = client.get("/metrics", **headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        assert response.json()["error"]["code"] == "not_authenticated"
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_the_bearer_scheme_is_any_case_and_a_post_is_405(settings, metrics_token):
    """Second-round findings: ``bearer <token>`` was refused (schemes are
    case-insensitive), and a POST got the CSRF check's HTML 403 instead of 405."""
    strict = Client(enforce_csrf_checks=True)
    for scheme in ("bearer", "BEARER", "Bearer"):
        assert strict.get("/metrics", HTTP_AUTHORIZATION=f"{scheme} {TOKEN}").status_code == 200
    refused = strict.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert refused.status_code == 405
    assert refused.json()["error"]["code"] == "method_not_allowed"  # JSON, as every error


def test_with_nothing_configured_nobody_gets_metrics(client, settings):
    settings.FORGE_METRICS_TOKEN = ""
    settings.FORGE_METRICS_ALLOW = []
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_an_allowed_address_needs_no_token(client, settings):
    settings.FORGE_METRICS_TOKEN = ""
    settings.FORGE_METRICS_ALLOW = ["10.0.0.0/8", "127.0.0.1"]
    assert client.get("/metrics").status_code == 200  # the test client is 127.0.0.1
    settings.FORGE_METRICS_ALLOW = ["10.0.0.0/8"]
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert client.post("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 405


def test_an_ipv4_peer_of_a_dual_stack_server_is_matched_as_ipv4(client, settings):
    """QA: daphne bound to ``::`` (dual stack) sees an IPv4 scraper as ``::ffff:a.b.c.d``,
    which no IPv4 network in FORGE_METRICS_ALLOW held: Prometheus at 10.1.2.3 got 403
    with ``FORGE_METRICS_ALLOW=10.0.0.0/8``."""
    settings.FORGE_METRICS_TOKEN = ""
    settings.FORGE_METRICS_ALLOW = ["10.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:192.168.1.2").status_code == 403


def test_a_token_read_with_a_trailing_newline_still_matches(client, settings):
    """QA: a token put in the environment from a file (a Kubernetes secret, an env file
    written by ``echo``) kept its newline, which no ``Authorization`` header carries
    (Prometheus trims its ``credentials_file``): every scrape was 401."""
    settings.FORGE_METRICS_TOKEN = f"{TOKEN}\n"
    settings.FORGE_METRICS_ALLOW = []
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    settings.FORGE_METRICS_TOKEN = " \n"  # blank: no token, so no credentials help
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_a_bad_network_in_the_allow_list_stops_the_process_at_start(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from forge.settings.env import env_networks

    monkeypatch.setenv("FORGE_METRICS_ALLOW", "127.0.0.1, 10.0.0.300/8")
    with pytest.raises(ImproperlyConfigured, match=r"10\.0\.0\.300/8"):
        env_networks("FORGE_METRICS_ALLOW")
    monkeypatch.setenv("FORGE_METRICS_ALLOW", "127.0.0.1, ::1, 10.0.0.0/8")
    assert env_networks("FORGE_METRICS_ALLOW") == ["127.0.0.1", "::1", "10.0.0.0/8"]


async def test_the_counters_move_after_a_turn_through_the_socket(
    session, token, agents, settings, script, metrics_token
):
    from asgiref.sync import sync_to_async

    agents["build"].tools = ["read_file"]
    await sync_to_async(agents["build"].save)()
    script([tool_reply("read_file", '{"path": "missing.txt"}'), text_reply("done reading")])
    client = Client()
    before = await sync_to_async(scrape)(client)

    ws = socket(session.pk, token)
    await ws.connect(timeout=10)
    await backlog(ws)  # session.created, then the status
    during = await sync_to_async(scrape)(client)
    streams = ("forge_streams_open", (("face", "socket"),))
    assert during[streams] == before.get(streams, 0) + 1
    await ws.send_to(text_data=json.dumps({"type": "prompt", "text": "read it"}))
    ack, _ = await until_ack(ws)
    await frames_until(ws, finished(ack["assistant_message_id"]))
    await ws.disconnect()
    after = await sync_to_async(scrape)(client)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert after[streams] == before.get(streams, 0)
    assert moved("forge_frames_sent_total", face="socket") >= 10
    assert moved("forge_deltas_sent_total", face="socket") >= 1
    assert moved("forge_tool_calls_total", tool="read_file") == 1
    assert moved("forge_tool_errors_total", tool="read_file") == 1  # no such file
