"""The runtime's database thread after the server closed its connection (a PostgreSQL
restart, a failover, ``pg_terminate_backend``)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import DatabaseError, connection

from forge.db.worker import db

pytestmark = [pytest.mark.postgres_only, pytest.mark.django_db(transaction=True)]


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def on_the_runtime_thread() -> int:
    return int(async_to_sync(db(backend_pid))())


def terminate(pid: int) -> None:
    """Close backend ``pid`` from a connection of its own (as a failover would)."""
    params = connection.get_connection_params()
    dsn = {k: params[k] for k in ("dbname", "user", "host", "port") if params.get(k)}
    with psycopg.connect(**dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


def test_the_runtime_thread_replaces_a_connection_the_server_closed() -> None:
    """QA (HIGH): the runtime thread keeps its connection for the process's life, and
    Django drops a broken one only at a request's start and end, which that thread has
    none of: after the server closed it, every prompt of the process failed (500, a
    socket closed with 1011) until daphne was restarted. The unit of work that meets
    the closed connection fails; the next one gets a new connection."""
    pid = on_the_runtime_thread()
    terminate(pid)
    with pytest.raises(DatabaseError):
        on_the_runtime_thread()
    assert on_the_runtime_thread() != pid
    assert on_the_runtime_thread() == on_the_runtime_thread()  # kept, as before


@pytest.mark.timeout(60)
async def test_a_socket_prompt_that_meets_the_closed_connection_gets_an_error_frame(
    session: Any, token: str
) -> None:
    """The same finding on the socket: the prompt that met the closed connection closed
    the socket (1011). It gets an error frame; the socket stays open, and the next
    prompt starts its turn."""
    from tests.api.test_socket import backlog, finished, frames_until, socket, until_ack

    pid = await db(backend_pid)()
    ws = socket(session.pk, token)
    assert (await ws.connect(timeout=10))[0]
    await backlog(ws)
    await sync_to_async(terminate)(pid)
    await ws.send_json_to({"type": "prompt", "text": "hello", "client_id": "c1"})
    frames = await frames_until(ws, lambda f: bool(f) and f[-1]["kind"] in ("error", "ack"))
    assert (frames[-1]["kind"], frames[-1]["code"], frames[-1]["client_id"]) == (
        "error",
        "server_error",
        "c1",
    )
    await ws.send_json_to({"type": "prompt", "text": "hello again", "client_id": "c2"})
    ack, _ = await until_ack(ws)
    assert ack["client_id"] == "c2"
    await frames_until(ws, finished(ack["assistant_message_id"]))
    await ws.disconnect()
