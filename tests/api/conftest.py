from __future__ import annotations

from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.runtime.conftest import record, script  # noqa: F401 - shared fixtures


@pytest.fixture
def token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


@pytest.fixture
def api(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def stranger_token(other_user: Any) -> str:
    return Token.objects.get_or_create(user=other_user)[0].key


@pytest.fixture
def stranger(stranger_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {stranger_token}")
    return client


def error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message"} <= set(body["error"]), body
    return dict(body["error"])
