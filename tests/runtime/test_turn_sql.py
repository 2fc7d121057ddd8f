"""The turn's plain-SQL reads and writes say what the ORM paths they replace say.

* ``memory.services.append_to_window`` (the window append of every turn after a
  speaker's first with an agent) writes the rows and counters ``append_dialogue``
  writes, and writes nothing for a core that is not there or a user who left the
  tenant;
* ``sessions.turn_sql.read_messages`` is ``selectors.messages_by_id``;
* ``sessions.turn_sql.last_step_tokens`` is ``selectors.last_step_tokens``, compaction
  and ``dialog_history`` blocks included;
* ``sessions.turn_sql.context_updates`` is ``selectors.context_updates``;
* the runtime's plain Agent read is the ORM's row;
* ``append_batch`` inside the caller's transaction takes no savepoint: a refused
  batch leaves that transaction usable, a write that fails dooms it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

from accounts.models import Membership
from forge.models import Agent
from forge.runtime import agents as runtime_agents
from memory import services as memory_services
from memory.models import DialogueMessage, MemoryCore
from sessions import selectors, services, sql, turn_sql
from sessions.exceptions import InvalidPart
from sessions.models import Message

pytestmark = pytest.mark.django_db


def _window(core: MemoryCore) -> list[tuple[int, str, str, str, str]]:
    return list(
        DialogueMessage.objects.filter(core=core)
        .order_by("seq")
        .values_list("seq", "role", "text", "session_id", "message_id")
    )


def _messages(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "text": f"message {i} é ✓",
            "session_id": "ses_x",
            "message_id": f"msg_{i:04d}",
        }
        for i in range(start, start + n)
    ]


def test_append_to_window_writes_what_append_dialogue_writes(tenant, user):
    core = memory_services.append_dialogue(
        tenant=tenant, user=user, agent="build", messages=_messages(3)
    )
    with transaction.atomic():
        assert memory_services.append_to_window(
            tenant_id=tenant.pk, user_id=user.pk, agent="build", messages=_messages(2, 3)
        )
    core.refresh_from_db()
    assert (core.window_next_seq, core.window_count) == (5, 5)
    assert core.last_interaction_at is not None
    assert _window(core) == [
        (i, m["role"], m["text"], "ses_x", m["message_id"]) for i, m in enumerate(_messages(5))
    ]
    # Another agent's core is another window: untouched.
    other = memory_services.append_dialogue(
        tenant=tenant, user=user, agent="explore", messages=_messages(1)
    )
    with transaction.atomic():
        assert memory_services.append_to_window(
            tenant_id=tenant.pk, user_id=user.pk, agent="explore", messages=_messages(1, 9)
        )
    other.refresh_from_db()
    core.refresh_from_db()
    assert [row[0] for row in _window(other)] == [0, 1]
    assert (core.window_next_seq, core.window_count) == (5, 5)


def test_append_to_window_writes_nothing_without_a_core_or_a_membership(tenant, user):
    with transaction.atomic():
        assert not memory_services.append_to_window(
            tenant_id=tenant.pk, user_id=user.pk, agent="build", messages=_messages(2)
        )
    assert not MemoryCore.objects.exists()
    core = memory_services.append_dialogue(
        tenant=tenant, user=user, agent="build", messages=_messages(1)
    )
    Membership.objects.filter(tenant=tenant, user=user).delete()
    with transaction.atomic():
        assert not memory_services.append_to_window(
            tenant_id=tenant.pk, user_id=user.pk, agent="build", messages=_messages(2, 1)
        )
    core.refresh_from_db()
    assert (core.window_next_seq, core.window_count) == (1, 1)
    assert len(_window(core)) == 1


def _exchange(session: Any) -> tuple[str, str]:
    user = services.update_message(session=session, info={"role": "user"}).data
    services.update_part(
        session=session, part={"message_id": user["id"], "type": "text", "text": "hello ✓"}
    )
    reply = services.update_message(
        session=session, info={"role": "assistant", "parent_id": user["id"]}
    ).data
    for text in ("one", "two", "three"):
        services.update_part(
            session=session, part={"message_id": reply["id"], "type": "text", "text": text}
        )
    return user["id"], reply["id"]


def test_read_messages_is_messages_by_id(session, other_user):
    asked, answered = _exchange(session)
    other_session = services.create_session(user=other_user, title="elsewhere")
    foreign, _ = _exchange(other_session)
    ids = [asked, answered, foreign, "msg_missing"]
    expected = selectors.messages_by_id(tenant=session.tenant, session=session, message_ids=ids)
    with connection.cursor() as cursor:
        found = turn_sql.read_messages(
            cursor,
            sql.Dialect(cursor),
            tenant_id=session.tenant_id,
            session_id=session.pk,
            message_ids=ids,
        )
    assert found == expected
    assert set(found) == {asked, answered}  # another session's message is not this one's


def _tokens(session: Any) -> tuple[Any, Any]:
    expected = selectors.last_step_tokens(
        tenant=session.tenant, session=session, stale_after_blocks=("dialog_history",)
    )
    with connection.cursor() as cursor:
        found = turn_sql.last_step_tokens(
            cursor,
            sql.Dialect(cursor),
            tenant_id=session.tenant_id,
            session_id=session.pk,
            stale_after_blocks=("dialog_history",),
        )
    if found is not None:
        assert found == expected
        return found["input"], found["output"]
    return expected, found


def test_last_step_tokens_is_the_selectors(session):
    assert _tokens(session) == (None, None)
    _, answered = _exchange(session)
    finish = {"message_id": answered, "type": "step-finish", "reason": "stop", "cost": 1.5e-05}
    services.update_part(session=session, part={**finish, "tokens": {"input": 7, "output": 3}})
    assert _tokens(session) == (7, 3)
    services.append_event(
        session=session,
        type="context.updated",
        data={"blocks": [{"kind": "system", "key": "agent", "text": "be brief"}]},
    )
    assert _tokens(session) == (7, 3)  # not a stale kind
    services.append_event(
        session=session,
        type="context.updated",
        data={"blocks": [{"kind": "dialog_history", "key": "memory", "text": "earlier"}]},
    )
    assert _tokens(session) == (None, None)
    services.update_part(session=session, part={**finish, "tokens": {"input": 9, "output": 1}})
    assert _tokens(session) == (9, 1)


def test_context_updates_is_the_selectors(session):
    for text in ("a", "b ✓"):
        services.append_event(
            session=session,
            type="context.updated",
            data={"blocks": [{"kind": "system", "key": "agent", "text": text}]},
        )
    _exchange(session)
    with connection.cursor() as cursor:
        found = turn_sql.context_updates(
            cursor, sql.Dialect(cursor), tenant_id=session.tenant_id, session_id=session.pk
        )
    assert found == selectors.context_updates(tenant=session.tenant, session=session)
    assert [u["blocks"][0]["text"] for u in found] == ["a", "b ✓"]


def test_the_runtimes_agent_read_is_the_orms_row(db):
    Agent.objects.all().delete()  # the migrations' agents
    Agent.objects.create(name="zeta", system_prompt="z", tools=["read_file"])
    made = Agent.objects.create(
        name="alpha",
        system_prompt="a ✓",
        model="offline/echo",
        tools=["list_files", "read_file"],
        temperature=0.25,
        context_limit=9000,
        auto_compact=False,
        mcp_servers={"time": {"command": "mcp-server-time", "args": []}},
        tool_approval={"default": "ask"},
    )
    assert runtime_agents.get_agent("alpha") == runtime_agents._config(made)
    # No default: the first by name; then the default, whatever its name.
    assert runtime_agents.default_agent() == runtime_agents._config(made)
    Agent.objects.filter(name="zeta").update(is_default=True)
    assert runtime_agents.default_agent().name == "zeta"


def test_a_batch_in_the_callers_transaction_takes_no_savepoint(session):
    queries: list[str] = []

    def record(execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        queries.append(query)
        return execute(query, params, many, context)

    with transaction.atomic(), connection.execute_wrapper(record):
        services.append_batch(
            session=session, writes=[services.UpdateMessage(info={"role": "user"})]
        )
    assert not [q for q in queries if "SAVEPOINT" in q.upper()]


def test_a_refused_batch_leaves_the_callers_transaction_usable(session):
    with transaction.atomic():
        with pytest.raises(InvalidPart):
            services.append_batch(
                session=session,
                writes=[services.UpdatePart(part={"message_id": "msg_nope", "type": "text"})],
            )
        services.update_message(session=session, info={"role": "user"})  # still usable
    assert Message.objects.filter(session=session).count() == 1


def test_a_failed_write_dooms_the_callers_transaction(session, monkeypatch):
    real_run = sql.run

    def run_then_fail(cursor: Any, dialect: Any, statements: Any) -> None:
        real_run(cursor, dialect, statements)
        raise DatabaseError("the write failed after the batch's statements ran")

    monkeypatch.setattr(sql, "run", run_then_fail)
    with pytest.raises(DatabaseError), transaction.atomic():
        try:
            services.append_batch(
                session=session, writes=[services.UpdateMessage(info={"role": "user"})]
            )
        except DatabaseError:
            assert transaction.get_connection().needs_rollback  # it cannot commit
            raise
    monkeypatch.undo()
    assert not Message.objects.filter(session=session).exists()
