"""Approval rules: names, globs, input pointers, precedence, the defaults' setting."""

from __future__ import annotations

import pytest

from forge.runtime.agents import AgentConfig
from forge.runtime.approvals.asking import approval_action
from forge.runtime.approvals.rules import InvalidRules, decide, parse_rules, resolve_pointer


def test_no_rule_allows():
    assert decide("write_file", {}) == "allow"
    assert decide("write_file", {}, None, {}) == "allow"


def test_by_name_and_by_glob():
    rules = {"write_file": "ask", "read_*": "deny"}
    assert decide("write_file", {}, rules) == "ask"
    assert decide("read_file", {}, rules) == "deny"
    assert decide("list_files", {}, rules) == "allow"


def test_the_exact_name_beats_a_glob_and_the_longer_glob_beats_the_shorter():
    rules = {"*": "deny", "write_*": "ask", "write_file": "allow"}
    assert decide("write_file", {}, rules) == "allow"
    assert decide("write_notes", {}, rules) == "ask"
    assert decide("read_file", {}, rules) == "deny"


def test_an_input_rule_comes_before_name_rules_and_matches_a_pointer():
    rules = [
        {"tool": "write_file", "pointer": "/path", "pattern": "secrets/*", "action": "deny"},
        {"tool": "write_file", "pointer": "/path", "pattern": "re:\\.md$", "action": "allow"},
        {"write_file": "ask"},
    ]
    assert decide("write_file", {"path": "secrets/key"}, rules) == "deny"
    assert decide("write_file", {"path": "docs/a.md"}, rules) == "allow"
    assert decide("write_file", {"path": "src/a.py"}, rules) == "ask"
    assert decide("write_file", {}, rules) == "ask"  # no value at the pointer: no match


def test_a_path_rule_sees_the_path_however_it_is_written():
    """A second-round finding: ``./secrets/k`` and ``sub/../secrets/k`` passed a deny
    rule on ``secrets/*`` and were written. A rule sees the normalized path too; it can
    only get stricter: deny and ask match on either form, allow only on both."""
    rules = [
        {"tool": "write_file", "pointer": "/path", "pattern": "secrets/*", "action": "deny"},
        {"tool": "write_file", "pointer": "/path", "pattern": "public/*", "action": "allow"},
        {"write_file": "ask"},
    ]
    for path in (
        "secrets/k",
        "./secrets/k",
        "sub/../secrets/k",
        "secrets//k",
        "sub\\..\\secrets/k",
    ):
        assert decide("write_file", {"path": path}, rules) == "deny", path
    assert decide("write_file", {"path": "public/a.txt"}, rules) == "allow"
    # public/* would match this text as given (* crosses /), not the file it names
    assert decide("write_file", {"path": "public/../src/a.py"}, rules) == "ask"
    assert decide("write_file", {"path": "./public/a.txt"}, rules) == "ask"  # both forms, or no
    assert decide("write_file", {"path": "src/a.py"}, rules) == "ask"


def test_a_pointer_reaches_into_lists_and_escaped_keys():
    assert resolve_pointer({"a": [{"b/c": 1}]}, "/a/0/b~1c") == (True, 1)
    assert resolve_pointer({"a": []}, "/a/0") == (False, None)
    rules = [{"tool": "*", "pointer": "/n", "pattern": "4*", "action": "deny"}]
    assert decide("anything", {"n": 42}, rules) == "deny"  # a number matched as its JSON


def test_the_agents_rules_come_before_the_defaults():
    assert decide("write_file", {}, {"write_file": "allow"}, {"*": "ask"}) == "allow"
    assert decide("read_file", {}, {"write_file": "allow"}, {"*": "ask"}) == "ask"


def test_the_defaults_come_from_the_setting(settings):
    settings.FORGE_TOOL_APPROVAL = {"write_file": "ask", "*": "allow"}
    agent = AgentConfig(name="build")
    assert approval_action(agent, "write_file", {}) == "ask"
    assert approval_action(agent, "read_file", {}) == "allow"
    strict = AgentConfig(name="strict", tool_approval={"write_file": "deny"})
    assert approval_action(strict, "write_file", {}) == "deny"


def test_the_setting_is_parsed_from_json(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from forge.settings.env import env_json

    monkeypatch.setenv("FORGE_TOOL_APPROVAL", '{"write_file": "ask"}')
    assert env_json("FORGE_TOOL_APPROVAL", {}) == {"write_file": "ask"}
    monkeypatch.setenv("FORGE_TOOL_APPROVAL", "{nope")
    with pytest.raises(ImproperlyConfigured):
        env_json("FORGE_TOOL_APPROVAL", {})


@pytest.mark.parametrize(
    "bad",
    [
        {"write_file": "maybe"},
        [{"tool": "x", "action": "allow", "pointer": "no-slash"}],
        [{"tool": "x", "action": "allow", "pointer": "/p", "pattern": "re:("}],
        ["write_file"],
        "ask",
    ],
)
def test_malformed_rules_are_refused_and_an_unreadable_set_asks(bad):
    with pytest.raises(InvalidRules):
        parse_rules(bad)
    assert decide("write_file", {}, bad) == "ask"


@pytest.mark.django_db
def test_the_agent_model_validates_its_rules():
    from django.core.exceptions import ValidationError

    from forge.models import Agent

    agent = Agent(name="strict", tool_approval={"write_file": "nope"})
    with pytest.raises(ValidationError):
        agent.full_clean()
    agent.tool_approval = {"write_file": "ask"}
    agent.full_clean()
