"""Password guessing at ``/login/`` and ``/admin/login/`` is cut short (a third-round
finding: 100 wrong passwords in 32 s were all answered, and the right one after them
let in)."""

from __future__ import annotations

import itertools
import random

import pytest
from django.test import Client

from accounts.services import create_user

pytestmark = pytest.mark.django_db

PASSWORD = "pw-guarded-123"

# Addresses of this run only: the counts live in the cache (Redis on the server
# stack), which other tests share and which is never flushed under them.
_ADDRESSES = (f"10.{random.randrange(256)}.{n // 256}.{n % 256}" for n in itertools.count())


@pytest.fixture
def guarded(settings) -> str:
    settings.FORGE_LOGIN_FAILURES = 3
    settings.FORGE_LOGIN_LOCKOUT_SECONDS = 600
    create_user(username="gail", tenant_name="guarded", password=PASSWORD, staff=True)
    return next(_ADDRESSES)


def _sign_in(client: Client, url: str, password: str, address: str):
    return client.post(url, {"username": "gail", "password": password}, REMOTE_ADDR=address)


@pytest.mark.parametrize("url", ["/login/", "/admin/login/"])
def test_after_the_failures_even_the_right_password_is_refused(guarded, url):
    client = Client()
    for _ in range(3):
        assert _sign_in(client, url, "wrong", guarded).status_code == 200  # the form again
    refused = _sign_in(client, url, PASSWORD, guarded)
    assert refused.status_code == 200
    assert "Too many failed sign-ins" in refused.text
    assert "_auth_user_id" not in client.session
    # another address is another pair: the user can still sign in from their machine
    other = Client()
    assert _sign_in(other, url, PASSWORD, next(_ADDRESSES)).status_code == 302


def test_a_success_clears_the_count(guarded):
    client = Client()
    for _ in range(2):
        _sign_in(client, "/login/", "wrong", guarded)
    assert _sign_in(client, "/login/", PASSWORD, guarded).status_code == 302
    client.logout()
    for _ in range(2):
        _sign_in(client, "/login/", "wrong", guarded)
    assert _sign_in(client, "/login/", PASSWORD, guarded).status_code == 302  # 2 of 3 again
