"""``manage.py roll_dialogs`` in this process (call_command)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memory import services
from memory.models import DialogueMessage, MemoryCore, MemoryMessage, MemorySlice, MemoryUnit

from .conftest import talk

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("roll_dialogs", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def counts() -> dict[str, Any]:
    return {
        model.__name__: sorted(model.objects.values_list("pk", flat=True))
        for model in (MemoryCore, MemoryUnit, MemorySlice, MemoryMessage, DialogueMessage)
    } | {"cores": list(MemoryCore.objects.order_by("pk").values())}


@pytest.fixture
def cores(tenant: Any, user: Any) -> dict[str, MemoryCore]:
    return {
        "due": talk(tenant=tenant, user=user, agent="due", turns=3),
        "small": talk(tenant=tenant, user=user, agent="small", turns=1),
    }


def test_once_rolls_the_due_cores_and_reports_them_in_json(cores):
    report = json.loads(run("--once", "--json", "--threshold", "6", "--keep", "2"))
    assert report["candidates"] == 1
    assert report["counts"] == {"rolled": 1}
    [core] = report["cores"]
    assert core["core"] == cores["due"].pk
    assert core["status"] == "rolled"
    assert core["trigger"] == "threshold"
    assert (core["messages"], core["trimmed"]) == (4, 4)  # the 2 newest stay unrolled
    assert core["slice"] == MemorySlice.objects.get().pk
    assert not report["dry_run"]
    assert not report["stopped"]
    # Idempotent: a second sweep finds nothing to do.
    again = json.loads(run("--json", "--threshold", "6", "--keep", "2"))
    assert (again["candidates"], again["counts"]) == (0, {})


def test_thresholds_come_from_settings(cores, settings):
    settings.FORGE_MEMORY_ROLL_THRESHOLD = 2
    settings.FORGE_MEMORY_ROLL_KEEP = 0
    report = json.loads(run("--json"))
    assert report["counts"] == {"rolled": 2}
    assert not DialogueMessage.objects.exists()


def test_plain_output_names_what_was_rolled(cores):
    text = run("--threshold", "6", "--keep", "2")
    assert f"{cores['due'].pk}: rolled (threshold) 4 messages" in text
    assert "1 candidate cores: 1 rolled" in text


def test_a_keep_over_the_threshold_is_capped_and_said(cores):
    """QA (LOW): ``--keep 50`` rolled with keep at ``threshold - 1`` and said nothing."""
    err = io.StringIO()
    call_command(
        "roll_dialogs", "--once", "--threshold", "4", "--keep", "50", "--dry-run",
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert "--keep 50 is capped at 3 (--threshold - 1)" in err.getvalue()


def test_dry_run_writes_nothing(cores):
    before = counts()
    report = json.loads(run("--dry-run", "--json", "--threshold", "2", "--idle-after", "0.001"))
    assert report["dry_run"]
    assert {c["status"] for c in report["cores"]} == {"would_roll"}
    assert {c["trigger"] for c in report["cores"]} == {"idle"}
    assert counts() == before
    plain = run("--dry-run", "--threshold", "2", "--keep", "0")
    assert "dry run: 2 candidate cores: 2 would_roll" in plain


def test_idle_after_rolls_small_windows_and_starts_new_sessions(cores):
    report = json.loads(run("--json", "--idle-after", "0.001"))
    assert report["counts"] == {"rolled": 2}
    assert {c["trigger"] for c in report["cores"]} == {"idle"}
    for core in MemoryCore.objects.all():
        assert core.window_count == 0
        assert core.memory_session_id != cores[core.agent].memory_session_id


def test_core_option_rolls_only_that_core_and_force_rolls_under_the_threshold(cores):
    report = json.loads(run("--json", "--core", cores["small"].pk, "--threshold", "6"))
    assert report["cores"][0]["status"] == "not_due"
    report = json.loads(run("--json", "--core", cores["small"].pk, "--force"))
    assert report["cores"][0]["status"] == "not_due"  # both messages are the newest 8
    report = json.loads(run("--json", "--core", cores["small"].pk, "--force", "--keep", "0"))
    assert report["cores"][0]["status"] == "rolled"
    assert report["cores"][0]["trigger"] == "manual"
    assert MemorySlice.objects.get().unit.core_id == cores["small"].pk


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threshold", "0"], "--threshold must be a positive integer, got 0"),
        (["--threshold", "-5"], "--threshold must be a positive integer, got -5"),
        (["--keep", "-1"], "--keep must be a non-negative integer"),
        (["--idle-after", "0"], "--idle-after must be positive"),
        (["--idle-after", "-3"], "--idle-after must be positive"),
        (["--loop", "--interval", "0"], "--interval must be a positive number"),
        # A second-round finding: a traceback (OverflowError, ValueError) or, for NaN, a
        # loop that swept ~500 times a second.
        *(
            (["--idle-after", value], "--idle-after must be a finite number of seconds")
            for value in ("inf", "nan", "1e308", "1e12")
        ),
        *(
            (["--loop", f"--interval={value}"], "--interval must be a positive number")
            for value in ("nan", "inf", "-inf", "1e9")
        ),
        (["--core", "mco_NOPE"], "no memory core 'mco_NOPE'"),
        (["--core", "'; drop table"], "no memory core"),
        (["--force"], "--force needs --core"),
        (["--interval", "5"], "--interval needs --loop"),
        (["--once", "--interval", "5"], "--interval needs --loop"),
        (["--once", "--loop"], "not allowed with argument"),
        (["--threshold", "many"], "invalid int value"),
    ],
)
def test_bad_options_are_a_clear_error(cores, args, message):
    before = counts()
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert counts() == before


def test_a_failing_core_is_named_the_others_roll(tenant, user, cores, settings):
    settings.FORGE_MEMORY_SUMMARIZER = "tests.memory.summarizers.picky"
    poisoned = services.append_dialogue(
        tenant=tenant,
        user=user,
        agent="poisoned",
        messages=[{"role": "user", "text": f"poison {i}"} for i in range(6)],
    )
    with pytest.raises(CommandError) as info:
        run("--threshold", "6", "--keep", "2")
    message = str(info.value)
    assert f"1 core failed to roll: {poisoned.pk} (summarizer_failed:" in message
    assert "cannot summarize poison" in message
    assert MemorySlice.objects.get().unit.core_id == cores["due"].pk
    stored = MemoryCore.objects.get(pk=poisoned.pk)
    assert (stored.window_count, stored.rolled_seq) == (6, 0)
    assert not MemoryUnit.objects.filter(core=poisoned).exists()


def test_a_misconfigured_summarizer_fails_every_due_core_cleanly(cores, settings):
    settings.FORGE_MEMORY_SUMMARIZER = "no.such.module.summarize"
    with pytest.raises(CommandError, match="summarizer_misconfigured: FORGE_MEMORY_SUMMARIZER"):
        run("--threshold", "6", "--keep", "2")
    assert not MemorySlice.objects.exists()
