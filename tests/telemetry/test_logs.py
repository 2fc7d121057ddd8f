"""One JSON object per log line, and the turn-end line's fields (no prompt unless asked)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

from forge.telemetry.logs import JsonFormatter, turn_ended


def _line(caplog) -> dict:
    (record,) = [r for r in caplog.records if r.name == "forge.turns"]
    return json.loads(JsonFormatter().format(record))


def test_a_turn_end_is_one_json_line_without_the_prompt(caplog):
    caplog.set_level(logging.INFO, logger="forge.turns")
    turn_ended(
        session_id="ses_1",
        tenant_id=3,
        message_id="msg_2",
        agent="build",
        model="openai/gpt-x",
        outcome="failed",
        tokens={"input": 10, "output": 2},
        cost=0.25,
        first_delta_ms=123.456,
        duration_ms=2000.04,
        steps=2,
    )
    line = _line(caplog)
    assert line["event"] == "turn.ended"
    assert line["level"] == "INFO"
    assert (line["session_id"], line["tenant_id"], line["outcome"]) == ("ses_1", 3, "failed")
    assert (line["tokens"], line["cost"], line["first_delta_ms"]) == (
        {"input": 10, "output": 2},
        0.25,
        123.5,
    )
    assert "prompt" not in line
    assert line["message"] == "turn msg_2 of session ses_1 failed in 2000 ms"


def test_exceptions_stay_inside_the_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed: %s", ("it",), sys.exc_info()
        )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "failed: it"
    assert "ValueError: boom" in line["exception"]


def test_production_logs_json_unless_told_otherwise():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "forge.settings.production",
        "FORGE_SECRET_KEY": "k" * 20 + "abcdefghij" * 4,
        "FORGE_ALLOWED_HOSTS": "forge.example",
    }
    code = (
        "from django.conf import settings; "
        "print(settings.LOGGING['handlers']['console']['formatter'])"
    )
    run = [sys.executable, "-c", f"import django; django.setup(); {code}"]
    assert (
        subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.strip()
        == "json"
    )
    env["FORGE_LOG_FORMAT"] = "plain"
    assert (
        subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout.strip()
        == "plain"
    )
    env["FORGE_LOG_FORMAT"] = "xml"
    failed = subprocess.run(run, env=env, capture_output=True, text=True)
    assert failed.returncode != 0
    assert "FORGE_LOG_FORMAT: plain or json" in failed.stderr
