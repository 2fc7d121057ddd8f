"""How long an import (as a copy, and keeping its ids) and a fork of one session take.

One session of N turns (a user message with its text part, an assistant message with
a text part, its completion: 5 events a turn) is built with the store's services,
exported, then imported back as a copy and as itself (into an emptied database, its
ids free), and forked at its last message. On SQLite the import holds the database's
one write lock for its whole transaction: every other writer of every tenant waits
that long (issue: an allowed 31 MB import blocked prompts for a minute).

    python bench/transfer.py [--turns 2000,8000] [--engines sqlite,postgres]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from table import engine_arguments, per_engine, print_table, start_django

BENCH_DB = "forge_bench_transfer"


def worker(engine: str, postgres_url: str, sizes: list[int]) -> dict[str, Any]:
    start_django(engine, postgres_url, BENCH_DB)
    from accounts.services import create_user
    from sessions import selectors, services
    from sessions.models import Message

    user = create_user(username="bench", tenant_name="bench", validate=False).user
    rows = []
    for turns in sizes:
        session = services.create_session(user=user, title="transfer")
        for n in range(turns):
            asked = services.update_message(
                session=session, info={"role": "user", "agent": "build"}
            ).data
            services.update_part(
                session=session,
                part={"message_id": asked["id"], "type": "text", "text": f"question {n} " * 8},
            )
            answer = services.update_message(
                session=session,
                info={"role": "assistant", "agent": "build", "parent_id": asked["id"]},
            ).data
            services.update_part(
                session=session,
                part={"message_id": answer["id"], "type": "text", "text": f"answer {n} " * 40},
            )
            services.update_message(
                session=session, info={"id": answer["id"], "completed_at": answer["created_at"]}
            )
        lines = list(selectors.export_lines(session=session))
        size = sum(len(line.encode()) + 1 for line in lines)
        events = services.parse_log(lines)
        began = time.perf_counter()
        services.import_log(user=user, events=events, copy=True)
        copy_s = time.perf_counter() - began
        last = Message.objects.filter(session=session).order_by("-id").values_list("id")[0][0]
        began = time.perf_counter()
        services.fork_session(session=session, before_message_id=last, user=user)
        fork_s = time.perf_counter() - began
        services.delete_session(session=session)  # its ids free again
        began = time.perf_counter()
        services.import_log(user=user, events=events)
        keep_s = time.perf_counter() - began
        rows.append(
            {
                "turns": turns,
                "events": len(events),
                "mb": size / 1e6,
                "copy": copy_s,
                "keep": keep_s,
                "fork": fork_s,
            }
        )
    return {"engine": engine, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", default="2000,8000")
    engine_arguments(parser)
    args = parser.parse_args()
    sizes = [int(n) for n in args.turns.split(",") if n]
    if args.worker:
        print(json.dumps(worker(args.worker, args.postgres_url, sizes)))
        return
    results = per_engine(str(Path(__file__).resolve()), args.engines, sys.argv[1:])
    print_table(
        ["engine", "turns", "events", "MB", "import copy s", "import keeping ids s", "fork s"],
        [
            [
                r["engine"],
                f"{row['turns']:,}",
                f"{row['events']:,}",
                f"{row['mb']:.1f}",
                f"{row['copy']:.2f}",
                f"{row['keep']:.2f}",
                f"{row['fork']:.2f}",
            ]
            for r in results
            for row in r["rows"]
        ],
    )


if __name__ == "__main__":
    main()
