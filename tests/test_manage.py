"""``manage.py`` itself: a command whose reader stops early (``| head``, ``| true``) ends
without a traceback, as a Unix tool does (QA: every command but export_session printed
``BrokenPipeError``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.live import server_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.django_db(transaction=True)  # committed: the command runs in its own process
@pytest.mark.parametrize(
    "command", [["rebuild_projections", "--check"], ["pending_approvals"], ["help"]]
)
def test_a_command_whose_reader_has_gone_prints_no_traceback(command):
    ran = subprocess.Popen(
        [sys.executable, "manage.py", *command],
        cwd=ROOT,
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert ran.stdout is not None
    ran.stdout.close()  # as `| true` does: before the command writes
    _, err = ran.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()
    assert b"BrokenPipeError" not in err
    assert ran.returncode == 1


def test_setup_app_role_refuses_an_empty_role():
    """QA (LOW): ``setup_app_role "$ROLE"`` with ``$ROLE`` empty set up the default role,
    which the operator had not named."""
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="ROLE must not be empty"):
        call_command("setup_app_role", " ")
