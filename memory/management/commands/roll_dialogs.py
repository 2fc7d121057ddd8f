"""``manage.py roll_dialogs``: DialogRolling without Celery (CONTRACT §5).

    roll_dialogs [--once | --loop --interval S] [--core ID] [--threshold N]
                 [--idle-after S] [--keep K] [--force] [--dry-run] [--json]

Rolls every core over the threshold or idle. Idempotent and safe to run
twice at once. Exit status 1 (naming the cores) when a core failed; bad
options exit 1 with a message. SIGTERM (or Ctrl-C) finishes the core in
hand, then stops.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from memory.exceptions import InvalidRollingOption
from memory.models import MemoryCore
from memory.rolling import RollingOptions, RollOutcome, SweepReport, sweep

MAX_INTERVAL = 86_400.0  # a day between sweeps at most


class Command(BaseCommand):
    help = "Roll the dialogue of memory cores over the threshold or idle into units and slices."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="one sweep, then exit (default)")
        mode.add_argument("--loop", action="store_true", help="sweep every --interval seconds")
        parser.add_argument(
            "--interval", type=float, help="with --loop: seconds between sweeps (default 60)"
        )
        parser.add_argument("--core", metavar="ID", help="only this core")
        parser.add_argument("--threshold", type=int, help="window size that triggers a rolling")
        parser.add_argument(
            "--keep", type=int, help="newest window messages left unrolled (for the next rolling)"
        )
        parser.add_argument("--idle-after", type=float, help="seconds without interaction")
        parser.add_argument(
            "--force", action="store_true", help="with --core: roll it even under the threshold"
        )
        parser.add_argument("--dry-run", action="store_true", help="report only; write nothing")
        parser.add_argument("--json", action="store_true", help="one JSON report per sweep")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            rolling = RollingOptions.build(
                threshold=options["threshold"],
                keep=options["keep"],
                idle_after=options["idle_after"],
            )
        except InvalidRollingOption as exc:
            raise CommandError(_option_message(str(exc))) from None
        if options["keep"] is not None and rolling.keep < options["keep"]:
            self.stderr.write(
                f"--keep {options['keep']} is capped at {rolling.keep} (--threshold - 1): a "
                "rolling leaves at most that many messages unrolled"
            )
        if options["interval"] is not None and not options["loop"]:
            # (It was taken, and one sweep run: an operator who forgot --loop got one.)
            raise CommandError("--interval needs --loop")
        if options["interval"] is None:
            options["interval"] = 60.0
        interval = options["interval"]
        if not math.isfinite(interval) or not 0 < interval <= MAX_INTERVAL:
            # (NaN passed ``<= 0`` and swept ~500 times a second; inf failed in wait())
            raise CommandError(
                f"--interval must be a positive number of seconds, at most {MAX_INTERVAL}"
            )
        if options["force"] and not options["core"]:
            raise CommandError("--force needs --core")
        core_ids = None
        if options["core"] is not None:
            if not MemoryCore.objects.filter(pk=options["core"]).exists():
                raise CommandError(f"no memory core {options['core']!r}")
            core_ids = [options["core"]]

        stop = threading.Event()
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in previous:
            signal.signal(sig, on_signal)
        try:
            while True:
                report = self._sweep(rolling, core_ids, options, stop)
                self._print(report, options)
                if not options["loop"]:
                    break
                if report.failed:
                    self.stderr.write(_failure_message(report))
                if stop.wait(options["interval"]):
                    break
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if not options["loop"] and report.failed:
            raise CommandError(_failure_message(report))

    def _sweep(
        self,
        rolling: RollingOptions,
        core_ids: list[str] | None,
        options: dict[str, Any],
        stop: threading.Event,
    ) -> SweepReport:
        bar: tqdm[Any] | None = None
        show = sys.stderr.isatty() and options["verbosity"] > 0

        def on_candidates(count: int) -> None:
            nonlocal bar
            if show:
                bar = tqdm(total=count, unit="core", desc="rolling", file=sys.stderr, leave=False)

        def on_outcome(outcome: RollOutcome) -> None:
            if bar is not None:
                bar.update(1)
            elif not options["json"] and options["verbosity"] > 1:
                self.stdout.write(_line(outcome))

        try:
            return sweep(
                options=rolling,
                core_ids=core_ids,
                force=options["force"],
                dry_run=options["dry_run"],
                should_stop=stop.is_set,
                on_outcome=on_outcome,
                on_candidates=on_candidates,
            )
        finally:
            if bar is not None:
                bar.close()

    def _print(self, report: SweepReport, options: dict[str, Any]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(report.wire(), sort_keys=True))
            return
        if options["verbosity"] == 0:
            return
        if options["verbosity"] == 1:
            for outcome in report.outcomes:
                if outcome.status in ("rolled", "would_roll", "failed"):
                    self.stdout.write(_line(outcome))
        counts = ", ".join(f"{n} {s}" for s, n in report.wire()["counts"].items()) or "nothing"
        prefix = "dry run: " if report.dry_run else ""
        stopped = " (stopped early)" if report.stopped else ""
        indexed = f", {report.indexed} slices indexed" if report.indexed else ""
        self.stdout.write(
            f"{prefix}{report.candidates} candidate cores: {counts}{indexed}"
            f" in {report.elapsed:.2f} s{stopped}"
        )


def _line(outcome: RollOutcome) -> str:
    if outcome.status == "failed" and outcome.error:
        return f"{outcome.core_id}: failed ({outcome.error['code']}: {outcome.error['message']})"
    if outcome.status in ("rolled", "would_roll"):
        verb = "rolled" if outcome.status == "rolled" else "would roll"
        return (
            f"{outcome.core_id}: {verb} ({outcome.trigger}) {outcome.messages} messages, "
            f"{outcome.trimmed} trimmed from the window"
            + (f", slice {outcome.slice_id}" if outcome.slice_id else "")
        )
    return f"{outcome.core_id}: {outcome.status.replace('_', ' ')}"


def _failure_message(report: SweepReport) -> str:
    failed = report.failed
    names = "; ".join(
        f"{o.core_id} ({(o.error or {}).get('code')}: {(o.error or {}).get('message')})"
        for o in failed
    )
    return f"{len(failed)} core{'s' if len(failed) != 1 else ''} failed to roll: {names}"


def _option_message(message: str) -> str:
    for name in ("threshold", "keep", "idle_after"):
        if message.startswith(name):
            return "--" + name.replace("_", "-") + message[len(name) :]
    return message
