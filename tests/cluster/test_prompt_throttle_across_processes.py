"""The prompt throttle counts a user's prompts in every process: its history lives in the
shared cache (the first Redis of ``REDIS_URL``), not in the process (issue 21, item 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.throttling import PromptRateThrottle

pytestmark = pytest.mark.postgres_only  # the server stack: a real Redis

ROOT = Path(__file__).resolve().parent.parent.parent

OTHER_PROCESS = """
import sys, django
django.setup()
from forge.throttling import PromptRateThrottle
class User:
    pk = int(sys.argv[1])
print(sum(PromptRateThrottle().allow_user(User()) for _ in range(2)))
"""


class _User:
    def __init__(self, pk: int) -> None:
        self.pk = pk


def test_prompts_in_another_process_count(settings, monkeypatch: pytest.MonkeyPatch) -> None:
    user = 920_000 + os.getpid()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "forge.settings.dev",
        "REDIS_URL": settings.REDIS_URL,
        "FORGE_REDIS_PREFIX": settings.FORGE_REDIS_PREFIX,
        "FORGE_PROMPT_RATE": "3/min",
    }
    other = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, str(user)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.stdout.strip() == "2", other.stderr  # two prompts over there

    monkeypatch.setattr(PromptRateThrottle, "THROTTLE_RATES", {"prompts": "3/min"})
    here = PromptRateThrottle()
    assert here.allow_user(_User(user))  # the third of the minute
    refused = PromptRateThrottle()
    assert not refused.allow_user(_User(user))  # a fourth, wherever it comes from
    wait = refused.wait()
    assert wait is not None
    assert wait > 0
