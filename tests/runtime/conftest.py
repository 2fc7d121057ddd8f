"""Runtime fixtures. Turns run DB work in threads, so runtime tests are transactional."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from sessions import bus


@pytest.fixture
def script(settings: Any, tmp_path: Path) -> Callable[[list[list[dict[str, Any]]]], Path]:
    """Make ``offline/script`` the model and give it these replies."""

    def use(replies: list[list[dict[str, Any]]]) -> Path:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(replies))
        settings.FORGE_MODEL = "offline/script"
        settings.FORGE_SCRIPT = str(path)
        return path

    return use


class Recorder:
    """Every frame the session's group carries, in order of arrival."""

    def __init__(self, layer: Any, channel: str) -> None:
        self.layer = layer
        self.channel = channel
        self.frames: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def _pump(self) -> None:
        while True:
            message = await self.layer.receive(self.channel)
            self.frames.append(message["frame"])

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def settle(self, quiet: float = 0.2, timeout: float = 20) -> list[dict[str, Any]]:
        """Wait for every turn seen starting to end (its ``idle`` status), then until no
        frame has arrived for ``quiet`` seconds. A turn starts at a ``busy`` that follows
        no status or ``idle`` (after a ``retry``, ``busy`` says the call streams again)."""
        async with asyncio.timeout(timeout):
            while True:
                statuses = [f["status"] for f in self.frames if f["kind"] == "status"]
                began = sum(
                    1
                    for before, status in zip([None, *statuses], statuses, strict=False)
                    if status == "busy" and before in (None, "idle")
                )
                if began <= statuses.count("idle"):
                    break
                await asyncio.sleep(0.02)
            count = -1
            while count != len(self.frames):
                count = len(self.frames)
                await asyncio.sleep(quiet)
        return self.frames

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["kind"] == kind]


@pytest.fixture
async def record() -> AsyncIterator[Callable[[Any], Any]]:
    recorders: list[Recorder] = []

    async def subscribe(session: Any) -> Recorder:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(bus.session_group(session.pk), channel)
        recorder = Recorder(layer, channel)
        recorder.start()
        recorders.append(recorder)
        return recorder

    yield subscribe
    for recorder in recorders:
        await recorder.stop()


def history(session: Any) -> list[dict[str, Any]]:
    from sessions import selectors

    return list(selectors.iter_history(tenant=session.tenant, session_id=session.pk))


async def ahistory(session: Any) -> list[dict[str, Any]]:
    return await database_sync_to_async(history)(session)


async def alog(session: Any) -> list[dict[str, Any]]:
    from sessions import selectors

    return await database_sync_to_async(lambda: list(selectors.iter_log(session=session)))()


def dead_lease(session: Any, reply_id: str) -> None:
    """The lease a process killed while running ``reply_id`` leaves: expired, its
    heartbeat a minute old, held by an owner no process is."""
    from datetime import timedelta

    from django.utils import timezone

    from forge.models import SessionLease

    now = timezone.now()
    SessionLease.objects.create(
        session=session,
        tenant_id=session.tenant_id,
        owner="dead-host:1:x",
        message_id=reply_id,
        acquired_at=now - timedelta(minutes=1),
        heartbeat_at=now - timedelta(minutes=1),
        expires_at=now - timedelta(seconds=1),
    )
