"""``set_budget`` and ``rebuild_usage``: clear messages and exit codes."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from forge.models import Budget, Usage
from forge.usage.services import record_reply

from .helpers import reply

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_set_budget_sets_changes_and_clears(tenant, user):
    set_tokens = run("set_budget", "--tenant", "acme", "--monthly-tokens", "1000")
    assert "budget of tenant acme: 1000 tokens, no cost limit a month" in set_tokens
    out = run("set_budget", "--tenant", "acme", "--monthly-cost", "2.5")
    assert "1000 tokens, 2.5 cost" in out
    run("set_budget", "--tenant", "acme", "--user", "alice", "--monthly-tokens", "10")
    only_cost = run("set_budget", "--tenant", "acme", "--user", "alice", "--monthly-cost", "1")
    assert "10 tokens, 1 cost a month" in only_cost
    assert Budget.objects.get(user=user).monthly_tokens == 10
    assert "no token limit, 1 cost" in run(
        "set_budget", "--tenant", "acme", "--user", "alice", "--monthly-tokens", "0"
    )
    assert Budget.objects.get(user=None).monthly_cost == Decimal("2.5")
    assert "removed" in run("set_budget", "--tenant", "acme", "--user", "alice", "--clear")
    assert "removed" in run(
        "set_budget", "--tenant", "acme", "--monthly-tokens", "0", "--monthly-cost", "0"
    )
    assert not Budget.objects.exists()
    # Clearing what is not there says so (it printed "removed").
    assert "tenant acme had no budget" in run("set_budget", "--tenant", "acme", "--clear")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "nope", "--monthly-tokens", "5"], "no tenant named 'nope'"),
        (["--tenant", "acme", "--user", "bob", "--monthly-tokens", "5"], "no user 'bob'"),
        # QA: an empty name set the whole tenant's budget
        (["--tenant", "acme", "--user", "", "--monthly-tokens", "5"], "--user must name a user"),
        (["--tenant", "acme", "--monthly-tokens", "-5"], "must not be negative"),
        (["--tenant", "acme", "--monthly-cost", "cheap"], "expected a number"),
        (["--tenant", "acme"], "give --monthly-tokens"),
        (["--tenant", "acme", "--clear", "--monthly-tokens", "5"], "--clear takes no limits"),
        # stored as 0 (10 places), it refused every prompt: "budget of 0 in cost is used up"
        (["--tenant", "acme", "--monthly-cost", "0.00000000001"], "at most 10 decimal places"),
        # Python's Decimal reads these; a person meant something else, or mistyped (QA)
        (["--tenant", "acme", "--monthly-tokens", "\uff15"], "expected a number"),
        (["--tenant", "acme", "--monthly-tokens", "1_000"], "expected a number"),
        (["--tenant", "acme", "--monthly-cost", "\u0663"], "expected a number"),
        # SQLite keeps a float: 24 digits were stored as 1E+14, which no read took back,
        # and 1234567.0123456789 as 1234567.01234568, the command saying the first (QA)
        (["--tenant", "acme", "--monthly-cost", "99999999999999.9999999999"], "significant"),
        (["--tenant", "acme", "--monthly-cost", "1234567.0123456789"], "at most 15 significant"),
    ],
)
def test_set_budget_refuses_bad_input_and_changes_nothing(tenant, user, other_user, args, message):
    with pytest.raises(CommandError, match=message):
        run("set_budget", *args)
    assert not Budget.objects.exists()


def test_rebuild_usage_recomputes_and_says_what_it_counted(session):
    _opened, done = reply(session, steps=[{"tokens": {"input": 3}, "cost": 0.1}])
    record_reply(session=session, info=done)
    Usage.objects.update(turns=42)
    assert "1 replies counted" in run("rebuild_usage")
    assert Usage.objects.get().turns == 1
    assert "tenant acme" in run("rebuild_usage", "--tenant", "acme", "--since", "2026-01-01")
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        run("rebuild_usage", "--since", "last week")
    with pytest.raises(CommandError, match="YYYY-MM-DD"):  # it meant all days, silently
        run("rebuild_usage", "--since", "")
    # The usage API's days: 20261201 and 2026-W49-1 were taken here, refused there (QA).
    for compact in ("20260101", "2026-W01-4"):
        with pytest.raises(CommandError, match="YYYY-MM-DD"):
            run("rebuild_usage", "--since", compact)
    with pytest.raises(CommandError, match="no tenant"):
        run("rebuild_usage", "--tenant", "nope")
    with pytest.raises(CommandError, match="no tenant named ''"):  # it meant every tenant
        run("rebuild_usage", "--tenant", "")


def test_ctrl_c_ends_rebuild_usage_with_a_message_not_a_traceback(db, monkeypatch):
    from forge.management.commands import rebuild_usage

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rebuild_usage, "rebuild_usage", interrupted)
    with pytest.raises(CommandError, match=r"interrupted; .* run it again"):
        call_command("rebuild_usage")


def test_a_cost_limit_warns_of_models_without_a_price(tenant, user, settings, admin_client):
    """QA: a model FORGE_MODEL_PRICES does not price (any openai/<model> of a vLLM or
    Ollama server but four) costs 0, so a cost limit never refused its replies, while
    set_budget and the admin said "budget of tenant acme: 10 cost a month" and nothing
    else. The limit is set, and both say which models it does not count."""
    from django.urls import reverse

    settings.FORGE_MODEL = "openai/llama3"
    settings.FORGE_SMALL_MODEL = "offline/echo"
    out, err = StringIO(), StringIO()
    call_command("set_budget", "--tenant", "acme", "--monthly-cost", "10", stdout=out, stderr=err)
    assert "10 cost a month" in out.getvalue()
    assert "no price for openai/llama3" in err.getvalue()
    assert "offline/echo" not in err.getvalue()  # priced
    err = StringIO()
    call_command(
        "set_budget",
        "--tenant",
        "acme",
        "--monthly-tokens",
        "5",
        "--monthly-cost",
        "0",
        stdout=StringIO(),
        stderr=err,
    )
    assert err.getvalue() == ""  # tokens only: nothing to warn of
    Budget.objects.all().delete()
    page = admin_client.post(
        reverse("admin:forge_budget_add"), {"tenant": tenant.pk, "monthly_cost": "3"}, follow=True
    )
    assert "no price for openai/llama3" in page.text
    settings.FORGE_MODEL = "offline/echo"
    err = StringIO()
    call_command("set_budget", "--tenant", "acme", "--monthly-cost", "10", stdout=out, stderr=err)
    assert err.getvalue() == ""
