"""schemathesis over the OpenAPI schema (every route, generated valid and invalid
input, with a real token): no request may end in a server error.

Bounded for CI (``FORGE_FUZZ_EXAMPLES`` per route, 25 by default, derandomized so
a run is reproducible); raise it by hand to dig deeper.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.timeout(600), pytest.mark.django_db(transaction=True)]


def _api_schema() -> Any:
    """The schema ``/api/schema/`` serves, generated in-process (no database needed)."""
    from drf_spectacular.generators import SchemaGenerator
    from rest_framework.utils.encoders import JSONEncoder

    raw = SchemaGenerator().get_schema(request=None, public=True)
    return schemathesis.openapi.from_dict(json.loads(json.dumps(raw, cls=JSONEncoder)))


# The import route's body: exported logs (JSON Lines), mostly broken ones.
schemathesis.openapi.media_type(
    "application/x-ndjson",
    st.one_of(
        st.binary(max_size=2000),
        st.lists(
            st.dictionaries(
                st.sampled_from(["seq", "id", "session_id", "type", "at", "data", "hash"]),
                st.one_of(st.integers(), st.text(max_size=30), st.none(), st.booleans()),
            ),
            max_size=5,
        ).map(lambda events: "\n".join(json.dumps(e) for e in events).encode()),
    ),
)
# The SSE route never ends by itself (the cases below use the caller's own session).
schema = _api_schema().exclude(path="/api/sessions/{id}/stream/")
EXAMPLES = int(os.environ.get("FORGE_FUZZ_EXAMPLES", "25"))


def documented(case: Any) -> set[str]:
    """The statuses the schema documents for the case's route (``default``: any)."""
    return set(case.operation.definition.raw["responses"])


@schema.parametrize()
@hypothesis_settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_route_answers_only_what_its_schema_documents(
    case: Any, token: str, session: Any, agents: Any
) -> None:
    """No server error, and no status the schema does not document for the route: a
    client generated from ``/api/schema/`` must know every answer it can get."""
    from forge.wsgi import application

    if "{id}" in case.path:
        # The caller's own session, so cases get past the lookup to the route's own
        # input handling (random ids are 404s: tests/api/test_isolation.py).
        case.path_parameters = {**(case.path_parameters or {}), "id": session.pk}
    response = case.call(app=application, headers={"Authorization": f"Token {token}"})
    where = (case.method, case.formatted_path, response.status_code, response.text[:500])
    assert response.status_code < 500, where
    if case.method.upper() != case.operation.method.upper():
        # A method the schema has no operation for (schemathesis tries TRACE, OPTIONS …):
        # 405 with the JSON error, but OPTIONS, which every DRF route answers with its
        # description (DRF's metadata).
        if case.method.upper() == "OPTIONS":
            assert response.status_code == 200, where
            assert response.json()["name"], where
        else:
            assert response.status_code == 405, where
            assert response.json()["error"]["code"] == "method_not_allowed", where
        return
    assert str(response.status_code) in documented(case) or "default" in documented(case), where


def test_the_stream_and_the_wait_flag_are_documented() -> None:
    """Third-round findings: the SSE route (a plain Django view) and ``?wait=`` were
    missing from the schema, and the AI SDK streams did not list their 503."""
    from drf_spectacular.generators import SchemaGenerator

    raw = SchemaGenerator().get_schema(request=None, public=True)
    stream = raw["paths"]["/api/sessions/{id}/stream/"]["get"]
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    assert {"401", "404", "429", "503"} <= set(stream["responses"])
    prompt = raw["paths"]["/api/sessions/{id}/messages/"]["post"]
    assert "wait" in [p["name"] for p in prompt["parameters"]]
    assert "503" in raw["paths"]["/api/chat"]["post"]["responses"]
