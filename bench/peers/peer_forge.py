"""Forge: the session store through ``sessions.services`` and a turn through ``forge.runtime``.

Runs with the project's own virtual environment, on a fresh SQLite file (WAL), the
in-memory bus (no Redis), ``FORGE_DEBUG=0``.

* store: a turn is :func:`write_turn` — the runtime's write pattern for a one-step text
  reply; the next turn's model input is ``forge.context.request_for(session)``, what the
  run loop derives before every step.
* turn: ``forge.runtime.start_turn`` to the end of its task, all turns inside one event
  loop, the model a provider registered as ``bench/deltas`` that streams the same 80
  deltas as every peer's fake model, no delay. The session has a title, so no title
  task runs beside the turns.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from importlib import import_module
from pathlib import Path
from typing import Any

import peers_common as common

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "Forge"


def setup() -> Path:
    """Configure Django on a fresh SQLite file, migrated; returns the file's path."""
    directory = Path(tempfile.mkdtemp(prefix="forge-peers-forge-"))
    path = directory / "forge.sqlite3"
    os.environ.pop("REDIS_URL", None)
    os.environ.update(
        {
            "DATABASE_URL": f"sqlite:///{path}",
            "FORGE_DEBUG": "0",
            "FORGE_MODEL": "bench/deltas",
            "FORGE_SMALL_MODEL": "offline/echo",
            "FORGE_RECOVER_ON_START": "0",
            "FORGE_WORKSPACE_ROOT": str(directory / "workspaces"),
            "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
        }
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return path


def new_session(title: str) -> Any:
    from accounts.services import create_user
    from sessions import services

    user = create_user(username=f"bench-{title}", tenant_name=f"bench-{title}", validate=False)
    return services.create_session(user=user.user, title=title)


def turn_writes(n: int) -> list[list[tuple[str, dict[str, Any]]]]:
    """One turn's writes as the runtime makes them for a one-step text reply (8 events),
    grouped by transaction as today's runtime commits them: the prompt (user message, its
    text part, the assistant message) together, then each its own: the step-start, the
    text part opened empty (text-start), the same part finished (text-end), the
    step-finish, the message's completion. Each write is ``("message", info)`` or
    ``("part", part)``."""
    from sessions.ids import new_message_id, new_part_id
    from sessions.log import format_time, now_ms

    model = {"provider": "bench", "model": "deltas"}
    # Ids in the order the runtime makes them: the step-start's before the text part's
    # (a text part older than its step-start is out of id order, and the context
    # cache would fall back to the full derivation on every turn).
    user_id, assistant_id = new_message_id(), new_message_id()
    step_id, text_id = new_part_id(), new_part_id()
    started = format_time(now_ms())
    text = {"id": text_id, "message_id": assistant_id, "type": "text"}
    tokens = {"input": 100, "output": 80, "reasoning": 0, "cache_read": 0, "cache_write": 0}
    return [
        [
            ("message", {"id": user_id, "role": "user", "agent": "build", "model": model}),
            ("part", {"message_id": user_id, "type": "text", "text": common.USER_TEXT}),
            (
                "message",
                {
                    "id": assistant_id,
                    "role": "assistant",
                    "parent_id": user_id,
                    "agent": "build",
                    "model": model,
                },
            ),
        ],
        [
            (
                "part",
                {"id": step_id, "message_id": assistant_id, "type": "step-start", "snapshot": ""},
            )
        ],
        [("part", {**text, "text": "", "time": {"start": started}})],
        [
            (
                "part",
                {
                    **text,
                    "text": common.REPLY_TEXT,
                    "time": {"start": started, "end": format_time(now_ms())},
                },
            )
        ],
        [
            (
                "part",
                {
                    "message_id": assistant_id,
                    "type": "step-finish",
                    "reason": "stop",
                    "snapshot": "",
                    "tokens": tokens,
                    "cost": 0.0,
                },
            )
        ],
        [
            (
                "message",
                {
                    "id": assistant_id,
                    "tokens": tokens,
                    "cost": 0.0,
                    "finish": "stop",
                    "completed_at": format_time(now_ms()),
                },
            )
        ],
    ]


# Where the runtime batches a step's writes (``services.append_batch``), a one-text turn
# commits three units: the prompt; the step-start with the opened text part (held until
# the part opens); the finished text part, the step-finish and the completion (held
# until the message update that ends the step). Indexes into :func:`turn_writes`' groups.
BATCHED_UNITS = [[0], [1, 2], [3, 4, 5]]


def write_turn(session: Any, n: int) -> None:
    """Write turn ``n`` the way the runtime does: one ``services.append_batch`` per unit
    where the store has it, else one transaction per group of :func:`turn_writes`
    (single entries). The only place the benchmark writes a Forge turn."""
    from django.db import transaction

    from sessions import services

    groups = turn_writes(n)
    append_batch = getattr(services, "append_batch", None)
    if append_batch is not None:
        as_write = {
            "message": lambda info: services.UpdateMessage(info=info),  # type: ignore[attr-defined,unused-ignore]
            "part": lambda part: services.UpdatePart(part=part),  # type: ignore[attr-defined,unused-ignore]
        }
        # The last unit commits with the turn's context snapshot, as the runtime's
        # ``complete_reply`` does (``forge.context.store_snapshot``, where there is one).
        store_snapshot = getattr(import_module("forge.context"), "store_snapshot", None)
        for index, unit in enumerate(BATCHED_UNITS):
            writes = [as_write[kind](data) for g in unit for kind, data in groups[g]]
            if store_snapshot is None or index < len(BATCHED_UNITS) - 1:
                append_batch(session=session, writes=writes)
                continue
            with transaction.atomic():
                store_snapshot(session, append_batch(session=session, writes=writes))
        return
    single = {
        "message": lambda info: services.update_message(session=session, info=info),
        "part": lambda part: services.update_part(session=session, part=part),
    }
    for group in groups:
        with transaction.atomic():
            for kind, data in group:
                single[kind](data)


def store(args: Any, path: Path) -> dict[str, Any]:
    from forge.context import request_for

    session = new_session("store")

    def load() -> None:
        _, request = request_for(session)
        assert request.messages

    return common.run_store(
        args,
        append=lambda n: write_turn(session, n),
        load=load,
        size_bytes=lambda: common.sqlite_bytes(path),
    )


class DeltasProvider:
    """Streams :data:`peers_common.DELTAS` as one text block of one step, zero delay."""

    name = "bench"

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from forge.providers import events as ev

        yield ev.StartStep()
        yield ev.TextStart("text-0")
        for delta in common.DELTAS:
            yield ev.TextDelta("text-0", delta)
        yield ev.TextEnd("text-0")
        yield ev.FinishStep("stop", ev.Usage(input=100, output=len(common.DELTAS)))


async def turns(args: Any) -> dict[str, Any]:
    from channels.db import database_sync_to_async

    from forge import providers
    from forge.runtime import start_turn
    from sessions import selectors

    providers.register("bench", lambda model: DeltasProvider())

    async def turn_in(title: str) -> Any:
        session = await database_sync_to_async(new_session)(title)

        def reply_text(message_id: str) -> str:
            message = selectors.get_message(
                tenant=session.tenant, session_id=session.pk, message_id=message_id
            )
            return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")

        async def turn(n: int) -> Any:
            started = await start_turn(session=session, text=common.USER_TEXT)
            await started.task

            async def text() -> str:
                return await database_sync_to_async(reply_text)(started.assistant_message_id)

            return text

        return turn

    return await common.arun_turns(args, await turn_in("turn"), warmup=await turn_in("warmup"))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = common.arguments(argv)
    result: dict[str, Any]
    if args.workload == "describe":
        from importlib.metadata import version

        result = {
            "variants": {"": SYSTEM},
            "versions": {"forge": version("forge"), "django": version("django")},
        }
    else:
        path = setup()
        outcome = store(args, path) if args.workload == "store" else asyncio.run(turns(args))
        result = {"system": SYSTEM, **outcome}
        shutil.rmtree(path.parent, ignore_errors=True)
    common.emit(result)
    return result


if __name__ == "__main__":
    main()
