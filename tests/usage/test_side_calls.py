"""Model calls that no session log records count in usage: memory's dialogue summary by
a real small model (a fourth-round finding: the provider billed it, usage and budgets
missed it). The OpenAI provider against a real HTTP server on loopback."""

from __future__ import annotations

from typing import Any

import pytest

from forge.models import SideUsage, Usage
from forge.usage.services import rebuild_usage
from memory import services as memory_services
from tests.memory.conftest import talk
from tests.providers.fake_openai import FakeOpenAI, reply, usage_chunk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def small_model(settings: Any) -> Any:
    with FakeOpenAI() as fake:
        settings.OPENAI_BASE_URL = fake.base_url
        settings.OPENAI_API_KEY = "sk-test"
        settings.FORGE_SMALL_MODEL = "openai/gpt-4o-mini"
        settings.FORGE_MEMORY_SUMMARIZER = "forge.runtime.small_model.summarize_dialogue"
        settings.FORGE_MODEL_PRICES = {"openai/gpt-4o-mini": {"input": 1.0, "output": 2.0}}
        yield fake


def test_a_rollings_model_summary_counts_for_the_memorys_user_and_agent(small_model, tenant, user):
    core = talk(tenant=tenant, user=user, agent="build", turns=3)
    small_model.push(reply(text=["Alice plans a trip."], usage=usage_chunk(300, 20)))
    outcome = memory_services.roll_core(tenant=tenant, core=core, keep=0)
    assert outcome.status == "rolled", outcome
    [row] = Usage.objects.values_list(
        "user_id", "agent", "model", "turns", "input_tokens", "output_tokens", "cost_nanos"
    )
    assert row == (user.pk, "build", "openai/gpt-4o-mini", 0, 300, 20, 340_000)
    assert SideUsage.objects.get().input_tokens == 300
    rebuild_usage()
    assert Usage.objects.get().input_tokens == 300  # the rebuild gives it back
