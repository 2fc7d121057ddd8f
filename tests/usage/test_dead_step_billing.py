"""A step cut by a dead runner is billed: a process killed, or stopped by its lost
lease, while the model streamed logged no end of that step. Recovery (or the lease's
next holder) finalizes the reply and logs the step's end, estimated from the log:
before, such a reply cost nothing of the step the provider had billed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError

from forge.models import Usage
from forge.runtime import lease, recover_sessions, start_turn
from forge.runtime.recovery import recover_session
from sessions import selectors, services
from tests.runtime.conftest import dead_lease

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

PRICED = {"input": 1.0, "output": 1.0}  # dollars per million tokens
LEASE = 1.5


def _reply(session: Any, message_id: str) -> dict[str, Any]:
    return selectors.get_message(
        tenant=session.tenant, session_id=session.pk, message_id=message_id
    )


def _left_mid_step(
    session: Any, *, text: str, call_input: dict[str, Any] | None, model: str = "p/m"
) -> str:
    """What a runner killed in the middle of a step leaves: its step-start, a text still
    open with what was written of it, maybe a running call, and an expired lease."""
    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    prompt = "please describe the weather " * 40
    services.update_part(session=session, part={"message_id": user, "type": "text", "text": prompt})
    reply = services.update_message(
        session=session,
        info={
            "role": "assistant",
            "parent_id": user,
            "model": dict(zip(("provider", "model"), model.split("/"), strict=True)),
        },
    ).data["id"]
    services.update_part(
        session=session, part={"message_id": reply, "type": "step-start", "snapshot": "snap"}
    )
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "text",
            "text": text,
            "time": {"start": "2026-11-30T00:00:00.000Z"},
        },
    )
    if call_input is not None:
        services.update_part(
            session=session,
            part={
                "message_id": reply,
                "type": "tool",
                "call_id": "c",
                "tool": "read_file",
                "state": {
                    "status": "running",
                    "input": call_input,
                    "time": {"start": "2026-11-30T00:00:00.000Z"},
                },
            },
        )
    dead_lease(session, reply)
    return reply


async def test_recovery_bills_the_step_a_dead_runner_was_in(session, agents, settings):
    settings.FORGE_MODEL, settings.FORGE_MODEL_PRICES = "p/m", {"p/m": PRICED}
    reply_id = await sync_to_async(_left_mid_step)(
        session, text="x" * 400, call_input={"path": "y" * 200}
    )
    assert await sync_to_async(recover_sessions)() == {session.pk: [reply_id]}
    reply = await sync_to_async(_reply)(session, reply_id)
    [end] = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert end["reason"] == "aborted"
    assert end["snapshot"] == "snap"
    # In: the request as of the step's start holds the prompt (1,120 characters).
    assert end["tokens"]["input"] > 1_120 // 4
    # Out: the 400 characters of text and the call's arguments, / 4.
    assert end["tokens"]["output"] == (400 + len('{"path": "' + "y" * 200 + '"}')) // 4
    assert end["cost"] > 0
    assert reply["info"]["cost"] == end["cost"]
    assert reply["info"]["tokens"] == end["tokens"]
    billed = await sync_to_async(lambda: list(Usage.objects.values_list("steps", "cost_nanos")))()
    [(steps, cost_nanos)] = billed
    assert steps == 1
    assert cost_nanos > 0


async def test_a_dead_runners_finished_steps_are_not_billed_again(session, agents, settings):
    """A reply whose every step ended (its runner died while a tool ran) gets no extra
    step: its step-finish is what the provider billed."""
    settings.FORGE_MODEL, settings.FORGE_MODEL_PRICES = "p/m", {"p/m": PRICED}

    def left() -> str:
        reply_id = _left_mid_step(session, text="done", call_input={"path": "a"})
        services.update_part(
            session=session,
            part={
                "message_id": reply_id,
                "type": "step-finish",
                "reason": "tool-calls",
                "snapshot": "snap",
                "tokens": {"input": 10, "output": 2},
                "cost": 0.000012,
            },
        )
        return reply_id

    reply_id = await sync_to_async(left)()
    await sync_to_async(recover_sessions)()
    reply = await sync_to_async(_reply)(session, reply_id)
    ends = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert [p["reason"] for p in ends] == ["tool-calls"]
    assert reply["info"]["cost"] == 0.000012


async def test_a_turn_that_lost_its_lease_is_billed_by_whoever_finalizes_it(
    settings, monkeypatch, session, agents
):
    """The runner stops before its lease can expire and writes nothing (the reply is the
    lease's next holder's); that holder logs the cut step's end."""
    settings.FORGE_MODEL = "offline/echo"
    settings.FORGE_ECHO_DELAY = 0.02  # 300 words: 6 s, well past the lease
    settings.FORGE_LEASE_SECONDS = LEASE
    settings.FORGE_MODEL_PRICES = {**settings.FORGE_MODEL_PRICES, "offline/echo": PRICED}

    def renew(**_: Any) -> bool:
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(lease, "renew", renew)
    started = await start_turn(session=session, text=" ".join(["word"] * 300))
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, 10)
    deadline = time.monotonic() + 10
    while not await sync_to_async(recover_session)(session):
        assert time.monotonic() < deadline, "the lease never expired"
        await asyncio.sleep(0.2)
    reply = await sync_to_async(_reply)(session, started.assistant_message_id)
    [end] = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert end["reason"] == "aborted"
    assert end["tokens"]["input"] > 300 * len("word ") // 4
    assert reply["info"]["cost"] == end["cost"] > 0
    billed = await sync_to_async(lambda: sum(Usage.objects.values_list("cost_nanos", flat=True)))()
    assert billed > 0


def test_a_manual_compaction_that_takes_a_dead_runners_lease_bills_its_step(
    session, agents, settings, monkeypatch
):
    """A manual compaction is a lease's next holder too: it finalized the dead runner's
    reply without its cut step's end (and without the text the mirror kept), so the
    step the provider had billed cost nothing."""
    from forge.runtime import compaction

    settings.FORGE_MODEL, settings.FORGE_MODEL_PRICES = "p/m", {"p/m": PRICED}
    monkeypatch.setattr(compaction, "plan", lambda session, **kwargs: None)
    reply_id = _left_mid_step(session, text="x" * 400, call_input=None)
    compaction.prepare_manual(session)
    reply = _reply(session, reply_id)
    assert reply["info"]["completed_at"]
    [end] = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert end["reason"] == "aborted"
    assert end["tokens"]["output"] == 400 // 4
    assert reply["info"]["cost"] == end["cost"] > 0
    assert sum(Usage.objects.values_list("cost_nanos", flat=True)) > 0


async def test_deleting_a_session_a_dead_runner_left_bills_its_reply(session, agents, settings):
    """Review: a deletion that takes over a dead runner's lease deleted the open reply
    with the log, never completed: none of its steps was counted, finished or cut."""
    settings.FORGE_MODEL, settings.FORGE_MODEL_PRICES = "p/m", {"p/m": PRICED}
    await sync_to_async(_left_mid_step)(session, text="x" * 400, call_input=None)
    await sync_to_async(lease.delete_session)(session=session)
    billed = await sync_to_async(lambda: list(Usage.objects.values_list("steps", "cost_nanos")))()
    [(steps, cost_nanos)] = billed
    assert steps == 1
    assert cost_nanos > 0


async def test_a_dead_step_is_priced_by_the_model_it_ran_on(session, agents, settings):
    """Review: an imported reply names any model, and its approval's resumption runs it
    on the agent's (``reply_agent_and_model``); the dead step was priced by the name the
    log gave, unpriced, so it cost 0 whatever it used."""
    settings.FORGE_MODEL, settings.FORGE_MODEL_PRICES = "p/m", {"p/m": PRICED}
    reply_id = await sync_to_async(_left_mid_step)(
        session, text="x" * 400, call_input=None, model="imported/anything"
    )
    await sync_to_async(recover_sessions)()
    reply = await sync_to_async(_reply)(session, reply_id)
    [end] = [p for p in reply["parts"] if p["type"] == "step-finish"]
    assert end["cost"] > 0
