"""Fixtures of the provider tests: the loopback OpenAI server and providers talking to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from forge.providers.openai import OpenAIProvider

from .fake_openai import FakeOpenAI


class FakeClock:
    """A clock that only moves when the provider sleeps (so retries are instant)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_provider(
    fake_openai: FakeOpenAI, clock: FakeClock
) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """``make_provider(**kwargs)``: an OpenAIProvider for the fake server, with the
    fake clock and its instant sleep unless given; closed after the test."""
    made: list[OpenAIProvider] = []

    def make(**kwargs: Any) -> OpenAIProvider:
        kwargs.setdefault("base_url", fake_openai.base_url)
        kwargs.setdefault("api_key", "sk-test")
        kwargs.setdefault("sleep", clock.sleep)
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("timeout", 10.0)
        provider = OpenAIProvider("gpt-fake", **kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()
