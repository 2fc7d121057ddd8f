"""Append one batch to a session's log in this process, and stop in it (the kill -9 test).

    python tests/sessions/batch_process.py SESSION_ID MESSAGE_ID PART_ID WHERE

``WHERE`` is where the process prints ``paused`` and sleeps, for the test to kill it:

* ``midway``: inside the batch's transaction, once the statements of two of its
  events ran (on SQLite one statement at a time, so the rest are still to run;
  on PostgreSQL all of them, in one round trip), before the commit;
* ``committed``: after ``append_batch`` returned.

Before that it prints one JSON line: the ids of the messages and parts the batch
writes. Settings come from the environment (``DATABASE_URL`` …).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def pause() -> None:
    print("paused", flush=True)
    time.sleep(600)


def main(session_id: str, message_id: str, part_id: str, where: str) -> None:
    from django.db import connection, transaction

    from accounts import tenancy
    from sessions import services, sql
    from sessions.ids import new_message_id, new_part_id
    from sessions.models import Session

    tenancy.activate(tenancy.ALL)
    session = Session.objects.get(pk=session_id)
    user_id, reply_id = new_message_id(), new_message_id()
    asked_id, text_id = new_part_id(), new_part_id()
    writes = [
        services.UpdatePart(part={"id": part_id, "text": "changed by the batch"}),
        services.UpdateMessage(info={"id": user_id, "role": "user"}),
        services.UpdatePart(
            part={"id": asked_id, "message_id": user_id, "type": "text", "text": "asked"}
        ),
        services.UpdateMessage(info={"id": reply_id, "role": "assistant", "parent_id": user_id}),
        services.UpdatePart(
            part={"id": text_id, "message_id": reply_id, "type": "text", "text": "answered"}
        ),
        services.RemoveMessage(message_id=message_id),
        services.UpdateMessage(info={"id": reply_id, "finish": "stop"}),
    ]
    print(json.dumps({"messages": [user_id, reply_id], "parts": [asked_id, text_id]}), flush=True)
    inserted = 0

    def stop_midway(execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal inserted
        result = execute(query, params, many, context)
        inserted += query.count(f"INSERT INTO {sql.EVENT} ")
        if inserted >= 2:
            pause()
        return result

    if where == "midway":
        # In a transaction of our own, so that PostgreSQL runs the batch under the lock
        # and stops before its commit (outside one, its single round trip is the commit).
        with connection.execute_wrapper(stop_midway), transaction.atomic():
            services.append_batch(session=session, writes=writes)
        raise SystemExit("the batch went through without stopping")
    services.append_batch(session=session, writes=writes)
    pause()


if __name__ == "__main__":
    import django

    django.setup()
    main(*sys.argv[1:5])
