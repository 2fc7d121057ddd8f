"""``GET /metrics``: the Prometheus text format, for whoever the operator allows.

Allowed are requests carrying ``Authorization: Bearer <FORGE_METRICS_TOKEN>`` and
requests from an address in ``FORGE_METRICS_ALLOW`` (addresses or networks, e.g.
``127.0.0.1,10.0.0.0/8``; the peer's address as the server sees it, so behind a
proxy list the proxy's address only if the proxy itself keeps ``/metrics`` off the
public side). With neither set, nobody is: metrics are opt-in. Anyone else gets a
JSON error: 401 ``not_authenticated`` with ``WWW-Authenticate: Bearer`` when a token
is configured (the right one would be let in: RFC 6750), else 403 ``forbidden``.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from functools import cache

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .metrics import forget_dead_processes

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@cache
def _networks(allow: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in allow)


def _token() -> str:
    """The configured token, without the white space around it: one read from a file
    (a Kubernetes secret, ``echo … > env``) ends with a newline no header carries."""
    return (settings.FORGE_METRICS_TOKEN or "").strip()


def allowed(request: HttpRequest) -> bool:
    token = _token()
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer":  # schemes are case-insensitive (RFC 9110)
        return hmac.compare_digest(credentials.strip().encode(), token.encode())
    allow = tuple(settings.FORGE_METRICS_ALLOW)
    if not allow:
        return False
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "")
    except ValueError:
        return False
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        # A server bound to "::" (dual stack) sees an IPv4 client as ::ffff:a.b.c.d,
        # which no IPv4 network holds: the scraper at 10.1.2.3 was refused (QA).
        peer = peer.ipv4_mapped
    return any(peer in network for network in _networks(allow))


def _registry() -> CollectorRegistry:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if directory:
        forget_dead_processes(directory)  # a daphne killed with SIGKILL streams nothing
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


@csrf_exempt  # a POST is 405 (below), not the CSRF check's HTML 403
def metrics(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        refused = JsonResponse(
            {"error": {"code": "method_not_allowed", "message": "use GET"}}, status=405
        )
        refused["Allow"] = "GET, HEAD"
        return refused
    if not allowed(request):
        message = (
            "metrics need Authorization: Bearer <FORGE_METRICS_TOKEN> "
            "or an address in FORGE_METRICS_ALLOW"
        )
        if not _token():  # no credentials would let this one in
            return JsonResponse({"error": {"code": "forbidden", "message": message}}, status=403)
        response = JsonResponse(
            {"error": {"code": "not_authenticated", "message": message}}, status=401
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
