"""Approval rules: which action a tool call gets (docs/approvals.md).

Rules come in two forms, and both may be mixed in one list:

* an object ``{"<tool or glob>": "allow" | "ask" | "deny"}``;
* a list of ``{"tool": glob, "pointer"?: "/json/pointer", "pattern"?: str,
  "action": ...}``: with a ``pointer``, the rule matches only when the input holds
  a value there that matches ``pattern`` (a glob, or a regular expression when it
  starts with ``re:``; a value that is not a string is matched as its JSON text).
  A string is matched as given and as a normalized path (``./secrets/k`` and
  ``sub/../secrets/k`` are ``secrets/k``): ``deny`` and ``ask`` rules match when
  either form does, ``allow`` rules only when both do.

Which rule wins (the most specific, then the first): rules that match on the
input come first, in the order given; then a rule naming the tool exactly; then
globs, the one with the most literal characters first (``write_*`` before
``*``), ties in the order given. The agent's rules are consulted first; only when
none of them matches are the defaults of ``FORGE_TOOL_APPROVAL``. No rule
matching: ``allow``.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Action = Literal["allow", "ask", "deny"]
ACTIONS: tuple[str, ...] = ("allow", "ask", "deny")
_WILDCARDS = re.compile(r"[*?\[\]]")


class InvalidRules(ValueError):
    """Rules that are not in either form (named by where they came from)."""


@dataclass(frozen=True)
class Rule:
    tool: str
    action: Action
    pointer: str | None = None
    pattern: str | None = None
    order: int = 0

    @property
    def exact(self) -> bool:
        return _WILDCARDS.search(self.tool) is None

    def rank(self) -> tuple[int, int, int]:
        """Sort key: input rules, then exact names, then globs by literal length."""
        if self.pointer is not None:
            return (0, 0, self.order)
        if self.exact:
            return (1, 0, self.order)
        return (2, -len(_WILDCARDS.sub("", self.tool)), self.order)

    def matches(self, tool: str, args: Any) -> bool:
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if self.pointer is None:
            return True
        found, value = resolve_pointer(args, self.pointer)
        if not found:
            return False
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        pattern = self.pattern if self.pattern is not None else "*"
        # A path names one file many ways (``./secrets/k``, ``sub/../secrets/k``): a rule
        # sees the text and its normalized form, and it can only get stricter for it: a
        # deny or ask rule matches when either does, an allow rule when both do.
        texts = {text}
        if isinstance(value, str):
            texts.add(_normalized(value))
        hits = [_match(pattern, candidate) for candidate in texts]
        return all(hits) if self.action == "allow" else any(hits)


def _match(pattern: str, text: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], text) is not None
    return fnmatch.fnmatchcase(text, pattern)


def _normalized(path: str) -> str:
    """``path`` as a file path normalized (``\\`` as ``/``, ``.`` and ``..`` resolved,
    a leading ``./`` dropped): ``sub/../secrets/k`` is ``secrets/k``."""
    return posixpath.normpath(path.replace("\\", "/")) if path else path


def resolve_pointer(document: Any, pointer: str) -> tuple[bool, Any]:
    """RFC 6901: ``(found, value)`` of ``pointer`` in ``document``."""
    if pointer == "":
        return True, document
    if not pointer.startswith("/"):
        return False, None
    current = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            return False, None
    return True, current


def _action(value: Any, where: str) -> Action:
    if value not in ACTIONS:
        raise InvalidRules(f"{where}: the action must be allow, ask or deny, not {value!r}")
    return value


def parse_rules(raw: Any, *, where: str = "rules") -> list[Rule]:
    """Rules in either form as a list of :class:`Rule`; ``InvalidRules`` when malformed."""
    if raw is None or raw == {} or raw == []:
        return []
    items: Iterable[Any] = [raw] if isinstance(raw, dict) else raw
    if not isinstance(raw, dict | list):
        raise InvalidRules(f"{where}: an object or a list of rules")
    rules: list[Rule] = []
    for item in items:
        if not isinstance(item, dict):
            raise InvalidRules(f"{where}: each rule is an object")
        if "action" in item or "pointer" in item:
            tool, pointer, pattern = item.get("tool", "*"), item.get("pointer"), item.get("pattern")
            if not isinstance(tool, str) or not tool:
                raise InvalidRules(f"{where}: a rule's tool is a name or a glob")
            if pointer is not None and (
                not isinstance(pointer, str) or not pointer.startswith("/")
            ):
                raise InvalidRules(f"{where}: a pointer is a JSON pointer such as /path")
            if pattern is not None and not isinstance(pattern, str):
                raise InvalidRules(f"{where}: a pattern is a string")
            if isinstance(pattern, str) and pattern.startswith("re:"):
                try:
                    re.compile(pattern[3:])
                except re.error as exc:
                    raise InvalidRules(f"{where}: bad regular expression: {exc}") from None
            action = _action(item.get("action"), where)
            rules.append(Rule(tool, action, pointer, pattern, order=len(rules)))
            continue
        for tool, action in item.items():
            if not isinstance(tool, str) or not tool:
                raise InvalidRules(f"{where}: a rule's key is a tool name or a glob")
            rules.append(Rule(tool, _action(action, where), order=len(rules)))
    return rules


def decide(tool: str, args: Any, *rule_sets: Any) -> Action:
    """The action for calling ``tool`` with ``args``: the first of ``rule_sets`` (raw
    rules, most important first: the agent's, then the defaults) holding a matching
    rule decides, by the module's order; none matching: ``allow``."""
    for raw in rule_sets:
        try:
            rules = parse_rules(raw)
        except InvalidRules:
            # A rule set that cannot be read protects nothing: ask rather than allow.
            return "ask"
        for rule in sorted(rules, key=Rule.rank):
            if rule.matches(tool, args):
                return rule.action
    return "allow"
