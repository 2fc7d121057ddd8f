"""Helpers for the memory store's tests: cores with dialogue, rollings that run their
AfterRolling consumers (tests run in a transaction that never commits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import TestCase

from memory import services
from memory.models import MemoryCore
from memory.rolling import RollingOptions, RollOutcome, roll


def turn(i: int) -> list[dict[str, Any]]:
    """Turn ``i``: a user message and the assistant's reply."""
    return [
        {"role": "user", "text": f"Question {i} about topic{i}. More detail here."},
        {"role": "assistant", "text": f"Answer {i} on topic{i}. Further words."},
    ]


def talk(*, tenant: Any, user: Any, agent: str = "build", turns: int = 1, first: int = 0) -> Any:
    core = None
    for i in range(first, first + turns):
        core = services.append_dialogue(tenant=tenant, user=user, agent=agent, messages=turn(i))
    return core


def options(**kwargs: Any) -> RollingOptions:
    return RollingOptions.build(**{"threshold": 6, "keep": 2, "idle_after": 600, **kwargs})


def roll_committed(core: MemoryCore | str, **kwargs: Any) -> RollOutcome:
    """``rolling.roll`` with its on-commit work (AfterRolling consumers) run."""
    core_id = core if isinstance(core, str) else core.pk
    kwargs.setdefault("options", options())
    with TestCase.captureOnCommitCallbacks(execute=True):
        return roll(core_id, **kwargs)


@pytest.fixture
def talker(tenant: Any, user: Any) -> Callable[..., Any]:
    def make(**kwargs: Any) -> Any:
        return talk(tenant=tenant, user=user, **kwargs)

    return make


@pytest.fixture
def other_tenant(other_user: Any) -> Any:
    return other_user.tenants.get()
