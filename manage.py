#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import select
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge.settings.dev")
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (``| head``, ``| true``): no traceback, as a Unix tool
        # (every command but export_session printed one; QA). stdout goes to devnull so
        # that Python's own flush at exit does not report the pipe again. A broken pipe
        # of anything else (stdout still flushes) is the command's error, shown as such.
        if not _stdout_gone():
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


def _stdout_gone() -> bool:
    """Whether standard output's reader has gone: a pipe with no reader polls as an
    error. Where that cannot be told (no poll), a broken pipe is taken to be it."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return True


if __name__ == "__main__":
    main()
