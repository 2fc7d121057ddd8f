"""Durable tool approvals through the runtime: ask, suspend, answer, go on (docs/approvals.md)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from channels.db import database_sync_to_async

from forge.errors import ApprovalAnswered, ApprovalExpired, ApprovalNotFound
from forge.runtime import answer, running_turn, start_turn
from forge.runtime.approvals import pending
from forge.runtime.approvals.services import expire_overdue
from forge.runtime.lease import current
from forge.runtime.recovery import recover_sessions

from .conftest import ahistory, dead_lease
from .test_turns import assistant, text_reply, tool_reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

WRITE = '{"path": "notes.txt", "content": "hi"}'


async def _until(check: Any, timeout: float = 45.0) -> Any:
    """Poll ``check`` (an async callable) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition was not met in time")
        await asyncio.sleep(0.05)


def _tool(item: dict) -> dict:
    return next(p for p in item["parts"] if p["type"] == "tool")


async def _suspended(session: Any, settings: Any, script: Any, replies: list) -> dict:
    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask", "*": "allow"}
    script(replies)
    started = await start_turn(session=session, text="write a note")
    await asyncio.wait_for(started.task, timeout=30)
    return assistant(await ahistory(session))


async def _finished(session: Any) -> dict:
    async def done() -> dict | None:
        reply = assistant(await ahistory(session))
        return reply if reply["info"].get("completed_at") else None

    return await _until(done)


async def test_an_ask_call_suspends_the_turn_and_approving_runs_it_and_goes_on(
    session, agents, settings, script, user
):
    reply = await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("written")]
    )
    tool = _tool(reply)
    assert tool["state"]["status"] == "awaiting-approval"
    assert tool["state"]["input"] == {"path": "notes.txt", "content": "hi"}
    assert tool["state"]["metadata"]["approval"]["expires_at"]
    assert reply["info"]["completed_at"] is None  # the reply stays open
    assert await database_sync_to_async(current)(session_id=session.pk) is None  # lease released
    task = running_turn(session.pk)
    assert task is None or task.done()  # no task is left running while it waits
    waiting = await database_sync_to_async(pending.pending_approvals)(
        tenant=session.tenant, session=session
    )
    assert [w["call_id"] for w in waiting] == ["call_1"]
    # The prompt path's one-statement check agrees with the ORM's list.
    assert await database_sync_to_async(pending.any_waiting)(session) is True

    await answer(session=session, user=user, call_id="call_1", approve=True, reason="fine")
    reply = await _finished(session)
    tool = _tool(reply)
    assert tool["state"]["status"] == "completed"
    assert await database_sync_to_async(pending.any_waiting)(session) is False
    assert tool["state"]["metadata"]["approval"]["approved"] is True
    assert tool["state"]["metadata"]["approval"]["by"] == user.pk
    texts = [p["text"] for p in reply["parts"] if p["type"] == "text"]
    assert texts == ["written"]
    assert reply["info"]["error"] is None
    # The file it wrote is in a patch, as a call run within its step would be (a
    # second-round finding: an approved call's changes had none).
    (patch,) = [p for p in reply["parts"] if p["type"] == "patch"]
    assert patch["files"] == ["notes.txt"]
    # The answer was logged before the tool ran: running (approved), then completed.
    from .conftest import alog

    states = [
        e["data"]["state"]["status"]
        for e in await alog(session)
        if e["type"] == "part.updated" and e["data"].get("type") == "tool" and "state" in e["data"]
    ]
    assert states[-3:] == ["awaiting-approval", "running", "completed"]


async def test_deny_ends_the_call_as_an_error_and_the_model_sees_the_reason(
    session, agents, settings, script, user
):
    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("ok, not writing")]
    )
    await answer(session=session, user=user, call_id="call_1", approve=False, reason="not today")
    reply = await _finished(session)
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["metadata"]["denied"] is True
    assert "not today" in tool["state"]["error"]
    # The next model request (the reply's second step) held the denial and its reason.
    from forge.context import request_for

    _, request = await database_sync_to_async(request_for)(session)
    assert "not today" in str(request.as_dict()["messages"])
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["ok, not writing"]


async def test_answers_refused_a_second_answer_an_unknown_call_and_another_user(
    session, agents, settings, script, user, other_user
):
    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("x")])
    with pytest.raises(ApprovalNotFound):
        await answer(session=session, user=user, call_id="nope", approve=True)
    with pytest.raises(ApprovalNotFound):
        await answer(session=session, user=other_user, call_id="call_1", approve=True)
    await answer(session=session, user=user, call_id="call_1", approve=False)
    with pytest.raises(ApprovalAnswered):
        await answer(session=session, user=user, call_id="call_1", approve=True)
    await _finished(session)


async def test_a_deny_rule_ends_the_call_without_asking(session, agents, settings, script):
    settings.FORGE_TOOL_APPROVAL = {"write_*": "deny"}
    script([tool_reply("write_file", WRITE), text_reply("denied then")])
    started = await start_turn(session=session, text="write")
    await asyncio.wait_for(started.task, timeout=30)
    reply = assistant(await ahistory(session))
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["metadata"]["denied"] is True
    assert reply["info"]["completed_at"] is not None


async def test_recovery_leaves_a_reply_awaiting_approval_open(
    session, agents, settings, script, user
):
    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("y")])
    recovered = await database_sync_to_async(recover_sessions)()
    assert recovered == {}
    reply = assistant(await ahistory(session))
    assert reply["info"]["completed_at"] is None
    assert _tool(reply)["state"]["status"] == "awaiting-approval"
    await answer(session=session, user=user, call_id="call_1", approve=True)
    assert [p["text"] for p in (await _finished(session))["parts"] if p["type"] == "text"] == ["y"]


async def test_an_expired_approval_is_denied_and_the_turn_goes_on(
    session, agents, settings, script, user
):
    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("expired it")]
    )
    await asyncio.sleep(0.3)  # past the expiry (a timestamp, not a timing assertion)
    denied = await asyncio.to_thread(_sweep)
    assert denied == 1
    reply = await _finished(session)
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["metadata"]["approval"]["expired"] is True
    # No one answered: the system's denial says the call was not run, not that the
    # user denied it (QA: an abort's read as the owner's refusal).
    assert tool["state"]["error"] == "this tool call was not run: the approval expired"
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["expired it"]
    with pytest.raises(ApprovalExpired):
        await answer(session=session, user=user, call_id="call_1", approve=True)


async def test_a_turn_after_an_expiry_runs_to_its_end_beside_the_janitor(
    session, agents, settings, script, user
):
    """The janitor ran each expired call's turn in its own thread, one after the other,
    and cancelled one that ran past ten FORGE_TOOL_TIMEOUT: its reply ended "aborted"
    though no one had asked (QA). Its sweep now returns once the denial is logged; the
    turn goes on in the process's continuations loop, to its end."""
    from tests.replies import paced, words

    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    settings.FORGE_TOOL_TIMEOUT = 0.05  # ten of it: 0.5 s, well under the reply below
    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), paced(words(15), 0.1)]
    )
    await asyncio.sleep(0.3)  # past the expiry (a timestamp, not a timing assertion)
    denied = await asyncio.to_thread(_sweep)
    assert denied == 1
    # The sweep is back while the 1.5 s reply still streams.
    assert assistant(await ahistory(session))["info"].get("completed_at") is None
    reply = await _finished(session)
    assert reply["info"]["error"] is None, reply["info"]["error"]
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == [
        "".join(words(15)).rstrip()
    ]


async def _going_on_after_expiry(session: Any, settings: Any, script: Any) -> Any:
    """A call that expires, the janitor's sweep, and the task of the turn that goes on
    (10 s of reply) in the continuations loop, not this one."""
    from tests.replies import paced, words

    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), paced(words(100), 0.1)]
    )
    await asyncio.sleep(0.3)  # past the expiry (a timestamp, not a timing assertion)
    assert await asyncio.to_thread(_sweep) == 1
    task = await _until(lambda: asyncio.sleep(0, running_turn(session.pk)))
    assert task.get_loop() is not asyncio.get_running_loop()
    return task


async def test_a_turn_going_on_after_an_expiry_can_be_aborted_from_the_server_loop(
    session, agents, settings, script, user
):
    """Its task belongs to the continuations loop: the abort stops it there, thread-safely,
    and waits for its end from here."""
    from forge.runtime import abort_turn

    task = await _going_on_after_expiry(session, settings, script)
    await abort_turn(session=session)
    assert task.done()
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert reply["info"]["error"]["message"] == "aborted"


async def test_a_stopping_server_ends_a_turn_going_on_after_an_expiry(
    session, agents, settings, script, user
):
    """A daphne asked to stop ended the turns of its own loop only: one going on after an
    expiry, in the continuations loop (a daemon thread), died with the process mid-reply,
    the reply open and the session busy until its lease expired (QA, carried)."""
    from forge.runtime.shutdown import _stop_turns

    settings.FORGE_SHUTDOWN_GRACE = 0
    task = await _going_on_after_expiry(session, settings, script)
    await _stop_turns()
    assert task.done()
    reply = await _finished(session)
    assert reply["info"]["error"]["message"] == "interrupted: the server shut down"
    assert await database_sync_to_async(current)(session_id=session.pk) is None


async def test_a_model_error_after_an_ask_call_ends_the_reply_and_denies_the_call(
    session, agents, settings, script, user
):
    """The step's stream broke after a call that waits for approval: the reply was left
    suspended, the error in no event, and approving the call ran it and the next step
    as if the step had succeeded (QA, MEDIUM). The reply ends with the error, as it
    does with no ``ask`` rule, and the call is denied: it was never run."""
    broken = [
        *tool_reply("write_file", WRITE)[:-1],
        {"type": "error", "name": "ProviderError", "message": "upstream connection reset"},
    ]
    reply = await _suspended(session, settings, script, [broken, text_reply("never")])
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"]["name"] == "ProviderError"
    assert reply["info"]["error"]["message"] == "upstream connection reset"
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["error"] == (
        "this tool call was not run: the model's reply ended with an error"
    )
    with pytest.raises((ApprovalAnswered, ApprovalNotFound)):
        await answer(session=session, user=user, call_id="call_1", approve=True)


async def test_an_approved_call_is_denied_when_the_rules_in_force_deny_it(
    session, agents, settings, script, user
):
    """The rules are checked again when the answer comes: a rule turned to ``deny``
    while the call waited (or an imported log's call renamed to a denied tool) ran
    once approved (QA, HIGH)."""
    from forge.tools import workspace_path

    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("done")]
    )
    settings.FORGE_TOOL_APPROVAL = {"write_file": "deny", "*": "allow"}
    await answer(session=session, user=user, call_id="call_1", approve=True)
    reply = await _finished(session)
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["error"] == "denied by an approval rule"
    workspace = workspace_path(session.pk, tenant_id=session.tenant_id, create=False)
    assert not (workspace / "notes.txt").exists()


async def test_the_pending_approvals_command_lists_the_waiting_calls(
    session, agents, settings, script, user
):
    """Staff had no command to see what waits for a person (QA): the API's session
    detail and the admin only."""
    import json

    from django.core.management import CommandError, call_command

    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("x")])

    def run(*args: str) -> str:
        out = io.StringIO()
        call_command("pending_approvals", *args, stdout=out)
        return out.getvalue()

    listed = await database_sync_to_async(run)()
    assert listed.splitlines()[-1] == "1 call(s) waiting for approval"
    line = listed.splitlines()[0]
    assert line.startswith(f"{session.pk}  call_1  write_file  ")
    assert '{"content": "hi", "path": "notes.txt"}' in line
    (row,) = [
        json.loads(text) for text in (await database_sync_to_async(run)("--json")).splitlines()
    ]
    assert row["call_id"] == "call_1"
    assert row["tenant"] == session.tenant.name
    other = await database_sync_to_async(run)(
        "--tenant", session.tenant.name, "--session", session.pk
    )
    assert other == listed
    with pytest.raises(CommandError, match="no session 'ses_nope'"):
        await database_sync_to_async(run)("--session", "ses_nope")
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        await database_sync_to_async(run)("--tenant", "nope")
    await answer(session=session, user=user, call_id="call_1", approve=False)
    await _finished(session)
    assert await database_sync_to_async(run)() == "0 call(s) waiting for approval\n"


@pytest.mark.postgres_only  # SQLite has no pool
async def test_the_janitor_holds_no_pooled_connection_while_it_waits_for_an_expiry(
    session, agents, settings, script, user, monkeypatch
):
    """The sweep read the session, then waited for the continuations loop to log the
    denial, holding its pooled connection the while; the denial needs one on the
    runtime's thread. With a small pool (``FORGE_DB_POOL=2``), a request that came then
    waited for the pool (QA: a detail GET hung). It gives its connection back first."""
    from django.db import connections

    from forge.runtime.approvals import services as approvals

    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("late")]
    )
    await asyncio.sleep(0.3)  # past the expiry (a timestamp, not a timing assertion)
    sweeper: list[Any] = []
    held: list[bool] = []
    real_expire = approvals.expire

    async def expire(**kwargs: Any) -> Any:
        held.append(sweeper[0].connection is not None)
        return await real_expire(**kwargs)

    def sweep() -> int:
        sweeper.append(connections["default"])
        return _sweep()

    monkeypatch.setattr(approvals, "expire", expire)
    # The suite's connections are not pooled; a served process's are (FORGE_DB_POOL).
    monkeypatch.setattr("forge.db.worker._pooled", lambda conn: conn.vendor == "postgresql")
    assert await asyncio.to_thread(sweep) == 1
    assert held == [False]
    await _finished(session)


def _sweep() -> int:
    from django.db import close_old_connections

    try:
        return expire_overdue()
    finally:
        close_old_connections()


async def test_an_answer_after_expiry_is_409_and_denies_it_as_expired(
    session, agents, settings, script, user
):
    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("z")])
    await asyncio.sleep(0.3)
    with pytest.raises(ApprovalExpired):
        await answer(session=session, user=user, call_id="call_1", approve=True)
    reply = await _finished(session)
    assert _tool(reply)["state"]["metadata"]["approval"]["expired"] is True


async def test_a_new_prompt_denies_the_waiting_call_first(session, agents, settings, script):
    await _suspended(
        session,
        settings,
        script,
        [tool_reply("write_file", WRITE), text_reply("second prompt answered")],
    )
    started = await start_turn(session=session, text="never mind, say hi")
    await asyncio.wait_for(started.task, timeout=30)
    items = await ahistory(session)
    first_reply = items[1]
    tool = _tool(first_reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["error"] == "this tool call was not run: the user sent a new prompt"
    assert first_reply["info"]["completed_at"] is not None
    assert [p["text"] for p in items[-1]["parts"] if p["type"] == "text"] == [
        "second prompt answered"
    ]


async def test_compacting_while_a_call_waits_is_refused_and_writes_nothing(
    session, agents, settings, script, user
):
    """A second-round finding: the boundary was written while the reply was suspended, and
    once the call was answered the model went on without the prompt, the calls or their
    results (all behind the boundary). Compacting then is 409 ``busy``."""
    from forge.errors import SessionBusy
    from forge.runtime import start_compaction
    from sessions import selectors

    await _suspended(
        session,
        settings,
        script,
        [tool_reply("write_file", WRITE), text_reply("done"), text_reply("summary")],
    )
    head = await database_sync_to_async(selectors.head_seq)(
        tenant=session.tenant, session_id=session.pk
    )
    with pytest.raises(SessionBusy, match="waits for tool calls"):
        await start_compaction(session=session)
    assert (
        await database_sync_to_async(selectors.head_seq)(
            tenant=session.tenant, session_id=session.pk
        )
        == head
    )
    assert await database_sync_to_async(current)(session_id=session.pk) is None  # no lease left
    call_id = _tool(assistant(await ahistory(session)))["call_id"]
    await answer(session=session, user=user, call_id=call_id, approve=True)
    reply = await _finished(session)
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["done"]


async def test_two_calls_with_one_id_are_logged_apart_and_answered_apart(
    session, agents, settings, script, user
):
    """A second-round finding: a step whose two calls had the same id listed both as
    waiting, approving the first ran the second, and the first could never be answered.
    The second is logged under the id with a suffix."""
    step = tool_reply("write_file", '{"path": "e.txt", "content": "e"}', call_id="x1")[:4]
    step += tool_reply("write_file", '{"path": "f.txt", "content": "f"}', call_id="x1")
    reply = await _suspended(session, settings, script, [step, text_reply("both done")])
    tools = [p for p in reply["parts"] if p["type"] == "tool"]
    assert [(t["call_id"], t["state"]["input"]["path"]) for t in tools] == [
        ("x1", "e.txt"),
        ("x1_2", "f.txt"),
    ]
    assert {t["state"]["status"] for t in tools} == {"awaiting-approval"}
    await answer(session=session, user=user, call_id="x1", approve=True)

    async def first_ran() -> bool:
        first = _tool(assistant(await ahistory(session)))
        return first["state"]["status"] == "completed" and not await database_sync_to_async(
            current
        )(session_id=session.pk)

    await _until(first_ran)  # it ran (e.txt, not f.txt); the second still waits
    await answer(session=session, user=user, call_id="x1_2", approve=False, reason="not f")
    reply = await _finished(session)
    tools = [p for p in reply["parts"] if p["type"] == "tool"]
    assert [(t["call_id"], t["state"]["status"]) for t in tools] == [
        ("x1", "completed"),
        ("x1_2", "error"),
    ]
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["both done"]


async def test_the_admin_lists_pending_approvals(session, agents, settings, script, admin_client):
    from django.urls import reverse

    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("a")])
    url = reverse("admin:forge_pendingapproval_changelist")
    page = await database_sync_to_async(admin_client.get)(url)
    assert page.status_code == 200
    assert "call_1" in page.text
    assert "write_file" in page.text
    assert session.tenant.name in page.text


async def test_the_context_preview_says_a_waiting_call_waits(session, agents, settings, script):
    """An earlier round's finding: GET …/context/ showed a call awaiting approval as
    interrupted."""
    from forge.context import request_for

    await _suspended(
        session, settings, script, [tool_reply("write_file", WRITE), text_reply("written")]
    )
    _, request = await database_sync_to_async(request_for)(session)
    [result] = [m for m in request.messages if m["role"] == "tool"]
    assert result["content"] == "Error: the tool call is waiting for the user's approval"


def _two_calls() -> list[dict]:
    step = tool_reply("write_file", '{"path": "e.txt", "content": "e"}', call_id="c1")[:4]
    return step + tool_reply("write_file", '{"path": "f.txt", "content": "f"}', call_id="c2")


async def test_answers_to_every_call_of_a_step_are_logged_together_and_go_on_once(
    session, agents, settings, script, user
):
    """What the AI SDK client sends: both calls of the step answered in one request.
    Answered one by one, the first answer's continuation held the lease, and the
    second was refused as busy; together, both are logged and the turn goes on once."""
    from forge.runtime.approvals.services import answer_all

    reply = await _suspended(session, settings, script, [_two_calls(), text_reply("both")])
    message_id = reply["info"]["id"]
    await answer_all(
        session=session,
        user=user,
        answers=[("c1", True, ""), ("c2", False, "not f")],
        message_id=message_id,
    )
    reply = await _finished(session)
    tools = [p for p in reply["parts"] if p["type"] == "tool"]
    assert [(t["call_id"], t["state"]["status"]) for t in tools] == [
        ("c1", "completed"),
        ("c2", "error"),
    ]
    assert "not f" in tools[1]["state"]["error"]
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["both"]
    assert len([p for p in reply["parts"] if p["type"] == "step-finish"]) == 2


async def test_answers_given_together_are_all_refused_when_one_is(
    session, agents, settings, script, user
):
    from forge.errors import InvalidAnswer
    from forge.runtime.approvals.services import answer_all

    reply = await _suspended(session, settings, script, [_two_calls(), text_reply("both")])
    message_id = reply["info"]["id"]
    user_message_id = reply["info"]["parent_id"]
    refusals: list[tuple[Any, list, str | None]] = [
        (ApprovalNotFound, [("c1", True, ""), ("nope", True, "")], message_id),
        (ApprovalNotFound, [("c1", True, "")], user_message_id),  # not the call's message
        (InvalidAnswer, [("c1", True, ""), ("c1", False, "")], message_id),
        (InvalidAnswer, [], message_id),
    ]
    for error, answers, named in refusals:
        with pytest.raises(error):
            await answer_all(session=session, user=user, answers=answers, message_id=named)
    tools = [p for p in assistant(await ahistory(session))["parts"] if p["type"] == "tool"]
    assert {t["state"]["status"] for t in tools} == {"awaiting-approval"}  # nothing logged
    assert await database_sync_to_async(current)(session_id=session.pk) is None
    await answer(session=session, user=user, call_id="c2", approve=False)  # one by one still
    with pytest.raises(ApprovalAnswered):  # a batch with an answered call logs nothing
        await answer_all(session=session, user=user, answers=[("c1", True, ""), ("c2", True, "")])
    tools = [p for p in assistant(await ahistory(session))["parts"] if p["type"] == "tool"]
    assert [t["state"]["status"] for t in tools] == ["awaiting-approval", "error"]
    await answer(session=session, user=user, call_id="c1", approve=True)
    reply = await _finished(session)
    assert [t["state"]["status"] for t in reply["parts"] if t["type"] == "tool"] == [
        "completed",
        "error",
    ]


def _crashed_mid_step_with_a_waiting_call(session: Any) -> str:
    """What a process killed in the middle of a step leaves when the step's call needs
    approval: the call is logged ``awaiting-approval`` as soon as the model names it,
    while the step's ``step-finish`` comes with the end of the model's stream."""
    from sessions import services

    user = services.update_message(session=session, info={"role": "user"}).data["id"]
    services.update_part(session=session, part={"message_id": user, "type": "text", "text": "go"})
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user}
    ).data["id"]
    services.update_part(session=session, part={"message_id": reply, "type": "step-start"})
    services.update_part(
        session=session,
        part={
            "message_id": reply,
            "type": "tool",
            "call_id": "call_1",
            "tool": "write_file",
            "state": {
                "status": "awaiting-approval",
                "input": {"path": "notes.txt", "content": "hi"},
                "time": {"start": "2026-12-07T00:00:00.000Z"},
            },
        },
    )
    dead_lease(session, reply)
    return reply


async def test_a_call_waiting_in_a_step_a_crash_cut_short_is_denied_by_recovery(
    session, agents, settings, user
):
    """QA (MEDIUM): recovery kept such a reply open for the answer, and approving it ran
    the tool and the next step as if the step had succeeded (its model call's usage
    never logged). The step never finished: its call is denied and the reply ended, as
    a model error after an ``ask`` call does."""
    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask", "*": "allow"}
    reply_id = await database_sync_to_async(_crashed_mid_step_with_a_waiting_call)(session)
    recovered = await database_sync_to_async(recover_sessions)()
    assert recovered == {session.pk: [reply_id]}
    reply = assistant(await ahistory(session))
    assert reply["info"]["completed_at"] is not None
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    tool = _tool(reply)
    assert tool["state"]["status"] == "error"
    assert tool["state"]["metadata"]["denied"] is True
    assert tool["state"]["metadata"]["approval"]["by"] == "system"
    assert "interrupted" in tool["state"]["error"]
    with pytest.raises((ApprovalAnswered, ApprovalNotFound)):
        await answer(session=session, user=user, call_id="call_1", approve=True)


async def test_an_abort_while_approved_calls_run_stops_the_ones_not_started(
    session, agents, settings, script, user
):
    """Both calls approved together; stop pressed while the first runs, a tool that
    swallows the cancellation (``asyncio.wait_for`` on the abort, Python 3.11). The
    second never runs, as between a step's own calls (QA: it wrote its file after the
    stop)."""
    from forge.runtime import abort_turn
    from forge.runtime.approvals.services import start_answers
    from forge.tools import Tool, temporary_tools, workspace_path

    running = asyncio.Event()

    async def stubborn(ctx: Any, args: dict) -> str:
        running.set()
        try:
            await asyncio.wait_for(ctx.abort.wait(), 5)
            return "saw the abort"
        except TimeoutError:
            return "slept"

    settings.FORGE_TOOL_APPROVAL = {"stubborn": "ask", "write_file": "ask"}
    step = tool_reply("stubborn", "{}", call_id="c1")[:4]
    step += tool_reply("write_file", '{"path": "after.txt", "content": "x"}', call_id="c2")
    with temporary_tools(Tool("stubborn", "waits", {"type": "object"}, stubborn)):
        script([step, text_reply("never")])
        started = await start_turn(session=session, text="go")
        await asyncio.wait_for(started.task, timeout=30)
        outcome = await start_answers(
            session=session, user=user, answers=[("c1", True, ""), ("c2", True, "")]
        )
        await asyncio.wait_for(running.wait(), 10)
        await abort_turn(session=session)
        if outcome.task is not None:
            await asyncio.wait({outcome.task}, timeout=20)
    reply = await _finished(session)
    workspace = workspace_path(session.pk, tenant_id=session.tenant_id, create=False)
    assert not (workspace / "after.txt").exists()
    states = {p["call_id"]: p["state"]["status"] for p in reply["parts"] if p["type"] == "tool"}
    assert states["c2"] == "error", states
    assert reply["info"]["error"]["name"] == "MessageAbortedError"


def _abort_as_it_commits(monkeypatch: Any, module: Any, name: str, session: Any) -> None:
    """Make ``module.name`` (run on the database thread, taking the lease) hand the loop
    an abort for the session once it has committed, before the turn's runner is
    registered: where a stop sent right after a prompt or an approval landed (QA)."""
    from forge.runtime import runner

    real = getattr(module, name)
    loop = asyncio.get_running_loop()

    def then_abort(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        message = {"type": "forge.abort", "session_id": session.pk}
        loop.call_soon_threadsafe(runner._abort_arrived, message)
        return done

    monkeypatch.setattr(module, name, then_abort)


async def test_an_abort_arriving_as_an_approval_starts_the_turn_stops_it(
    session, agents, settings, script, user, monkeypatch
):
    """QA (MEDIUM): the abort was dropped (no runner yet), the approved call ran and the
    next step too, and the abort answered that it had stopped the turn."""
    await _suspended(session, settings, script, [tool_reply("write_file", WRITE), text_reply("x")])
    _abort_as_it_commits(monkeypatch, pending, "log_answers", session)
    await answer(session=session, user=user, call_id="call_1", approve=True, reason="fine")
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert _tool(reply)["state"]["status"] == "error"  # it never ran
    assert not [p for p in reply["parts"] if p["type"] == "text"]

    async def released() -> bool:  # (given back by the runner as it ends, after the reply)
        return await database_sync_to_async(current)(session_id=session.pk) is None

    await _until(released)


async def test_an_abort_arriving_as_a_prompt_starts_its_turn_stops_it(
    session, agents, settings, script, monkeypatch
):
    from forge.runtime import runner

    script([text_reply("never said")])
    _abort_as_it_commits(monkeypatch, runner, "begin_turn", session)
    started = await start_turn(session=session, text="hello")
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, timeout=30)
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert not [p for p in reply["parts"] if p["type"] == "text"]
    assert await database_sync_to_async(current)(session_id=session.pk) is None
    assert runner._starting == {}
    assert runner._aborted_early == {}


@pytest.mark.parametrize("how", ["abort", "shutdown"])
async def test_a_turn_stopped_before_its_first_step_still_ends_its_reply(
    session, agents, settings, script, how
):
    """Stopped at once after it started (its task not yet run): a cancel then never ran
    the turn's code, and its reply stayed open with its lease held."""
    from forge.runtime import abort_turn, runner

    script([text_reply("never said")])
    started = await start_turn(session=session, text="hello")
    if how == "abort":
        await abort_turn(session=session)
    else:
        assert await runner.stop_turns(grace=0) == 1
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, timeout=30)
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    expected = "aborted" if how == "abort" else "interrupted"
    assert reply["info"]["error"]["message"].startswith(expected)
    assert await database_sync_to_async(current)(session_id=session.pk) is None


async def test_abort_turn_as_a_prompt_commits_stops_the_turn_on_this_process(
    session, agents, settings, script, monkeypatch
):
    """A review finding: ``abort_turn`` itself, sent as the prompt's transaction commits
    (the lease this process's, the runner not registered): it sent the abort to an
    inbox not joined (the in-memory layer joins none), waited for the turn's normal end,
    and answered that it had aborted it."""
    import time

    from forge.runtime import abort_turn, runner

    script([text_reply("never said")])
    real = runner.begin_turn
    loop = asyncio.get_running_loop()
    sent: list[Any] = []

    def then_abort(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        sent.append(asyncio.run_coroutine_threadsafe(abort_turn(session=session), loop))
        time.sleep(0.2)  # the abort reaches abort_turn before the runner is registered
        return done

    monkeypatch.setattr(runner, "begin_turn", then_abort)
    started = await start_turn(session=session, text="hello")
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(started.task, timeout=30)
    await asyncio.wrap_future(sent[0])
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    # (It may have begun streaming by the time the abort reached it.)
    assert "never said" not in [p.get("text") for p in reply["parts"]]


async def test_an_abort_for_an_ended_reply_does_not_stop_the_next_turn(
    session, agents, settings, script, monkeypatch
):
    """A review finding: the abort carried only the session, so one sent for a reply
    that ended meanwhile stopped the session's next turn as it started."""
    from forge.runtime import runner

    script([text_reply("said"), text_reply("said again")])
    first = await start_turn(session=session, text="one")
    await asyncio.wait_for(first.task, timeout=30)
    real = runner.begin_turn
    loop = asyncio.get_running_loop()
    stale = {"type": "forge.abort", "session_id": session.pk}

    def then_stale_abort(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        message = {**stale, "message_id": first.assistant_message_id}
        loop.call_soon_threadsafe(runner._abort_arrived, message)
        return done

    monkeypatch.setattr(runner, "begin_turn", then_stale_abort)
    second = await start_turn(session=session, text="two")
    await asyncio.wait_for(second.task, timeout=30)
    reply = await _finished(session)
    assert reply["info"]["error"] is None
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["said again"]


async def test_a_second_abort_does_not_break_the_ending_of_a_turn_stopped_before_it_ran(
    session, agents, settings, script, monkeypatch
):
    """A review finding: a turn stopped before its task ran is not cancelled, so a second
    abort (or a shutdown) cancelled it while it ended: the lease's release and the
    ``idle`` announcement were skipped."""
    import time

    from forge.runtime import lease, runner
    from sessions import services

    script([text_reply("never said")])
    loop = asyncio.get_running_loop()
    published: list[str] = []
    announce = services.apublish_status

    async def recording(*, session_id: str, status: Any) -> None:
        published.append(status)
        await announce(session_id=session_id, status=status)

    monkeypatch.setattr(services, "apublish_status", recording)
    started = await start_turn(session=session, text="hello")
    stopping = runner._runners[session.pk]
    runner._stop(stopping)  # before its task ran: told, not cancelled
    release = lease.release

    def slowly(**kwargs: Any) -> Any:
        loop.call_soon_threadsafe(runner._stop, stopping)  # a second abort, as it ends
        time.sleep(0.2)
        return release(**kwargs)

    monkeypatch.setattr(lease, "release", slowly)
    await asyncio.wait({started.task}, timeout=30)
    reply = await _finished(session)
    assert reply["info"]["error"]["name"] == "MessageAbortedError"
    assert await database_sync_to_async(current)(session_id=session.pk) is None
    assert published[-1] == "idle", published


@pytest.mark.parametrize("expires_at", [5, ["2000"], {"at": 1}])
async def test_a_call_whose_expiry_is_no_time_stops_no_tenants_sweep(
    session, agents, settings, script, other_user, expires_at
):
    """QA (MEDIUM): a tool part's metadata is free-form in the log, so an imported one
    may give a waiting call an ``expires_at`` that is no time (a number): comparing it
    raised in the janitor's sweep, which covers every tenant, at every pass, and no
    call of any tenant was denied as expired any more. A call whose expiry is no time
    is overdue."""
    from django.db import transaction

    from sessions import services
    from sessions.models import Part

    settings.FORGE_APPROVAL_TIMEOUT = 0.2
    theirs = await database_sync_to_async(services.create_session)(user=other_user, title="x")
    replies = [tool_reply("write_file", WRITE), text_reply("z")]
    await _suspended(theirs, settings, script, replies)

    def tamper() -> None:
        part = Part.objects.get(session=theirs, type="tool").data
        approval = {**part["state"]["metadata"]["approval"], "expires_at": expires_at}
        state = {**part["state"], "metadata": {"approval": approval}}
        with transaction.atomic():
            services.update_part(session=theirs, part={"id": part["id"], "state": state})

    await database_sync_to_async(tamper)()
    await _suspended(session, settings, script, replies)
    await asyncio.sleep(0.3)
    assert await asyncio.to_thread(_sweep) == 2
    for each in (session, theirs):
        reply = await _finished(each)
        assert _tool(reply)["state"]["metadata"]["approval"]["expired"] is True
