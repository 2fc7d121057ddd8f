"""A streamed body is read under the tenants its view saw (issue 17, HIGH 1).

The server reads a streamed body after the view returned and the request's tenant
scope ended; under row-level security the body's queries then saw nothing. Here the
body reports ``accounts.tenancy.visible()`` while it is read: it must be the
caller's tenant on every chunk, through the sync test client (WSGI) and the async
one (ASGI, a sync iterator consumed in a worker thread and an async one).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient, Client

from accounts.selectors import tenant_for_user

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.rls_urls"),
    # A server adapts a body of the other kind, and Django warns that it does.
    pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume"),
]


def lines(body: bytes) -> list[str]:
    return body.decode().splitlines()


@pytest.mark.parametrize("route", ["/streamed/", "/streamed-async/"])
def test_a_streamed_body_sees_the_callers_tenant_under_wsgi(user: Any, route: str):
    client = Client()
    client.force_login(user)
    response = client.get(route)
    assert response.status_code == 200
    # Iterated as a WSGI server does (an async body is consumed through async_to_sync).
    assert lines(b"".join(response)) == [str(tenant_for_user(user).pk)] * 3


@pytest.mark.parametrize("route", ["/streamed/", "/streamed-async/"])
async def test_a_streamed_body_sees_the_callers_tenant_under_asgi(user: Any, route: str):
    from channels.db import database_sync_to_async

    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(route)
    assert response.status_code == 200
    # Iterated as the ASGI handler does (a sync body is consumed in a worker thread).
    streamed: Any = response
    body = b"".join([chunk async for chunk in streamed])
    tenant = await database_sync_to_async(tenant_for_user)(user)
    assert lines(body) == [str(tenant.pk)] * 3
