"""The shapes a language pack (``en.py``, ``zh.py``) fills in: fact types and their parts.

A *fact type* is one kind of thing people tell each other (a trip, a new pet, a job
offer …). It names its slots, the short script of messages that plants it (some lines
marked as evidence), the questions it answers (each naming its evidence lines), and
distractor lines: mentions of the same entities that answer none of its questions.

Slot specs (``FactType.slots``):

* ``"vocab:KEY"``: a value from the pack's ``VOCAB[KEY]``, not reused within a
  conversation while unused ones remain; a dict entry sets several slots at once;
* ``"person"``: a name from the pack's ``PEOPLE`` (a relative, a friend, a teacher);
* ``"int:LO:HI"``, ``"price:LO:HI"``, ``"minutes:LO:HI"``: a number, written by the
  pack's ``num``, ``price`` or ``duration``;
* ``"month"``: a month name (the pack's ``month``);
* ``"when:CODE|CODE"``: a relative time (``yesterday``, ``last_weekend`` …), written
  by the pack's ``WHEN``; its answer (``when_answer``) is computed from the date of
  the session the line is said in, as in LoCoMo's temporal questions.

Every template is a ``str.format`` string over the slots plus ``owner`` / ``partner``
(the speakers' names) and, in English, the owner's pronouns ``subj``, ``obj``, ``pos``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Who = Literal["owner", "partner"]
Kind = Literal["single", "multi", "temporal"]

# LoCoMo's category numbers, so the generated file reads like the public one.
CATEGORY = {"multi": 1, "temporal": 2, "single": 4}


@dataclass(frozen=True)
class Step:
    """One message of a fact's script: who says it, the phrasings to pick from, and
    ``key`` when questions cite it as evidence."""

    who: Who
    templates: tuple[str, ...]
    key: str | None = None


@dataclass(frozen=True)
class Question:
    """Questions about one attribute of a fact; ``evidence`` names script keys."""

    kind: Kind
    templates: tuple[str, ...]
    answer: str
    evidence: tuple[str, ...] = ("e",)


@dataclass(frozen=True)
class FactType:
    slots: dict[str, str]
    script: tuple[Step, ...]
    questions: dict[str, Question]
    distractors: tuple[str, ...]
    short: str = ""  # "the trip to {place}": used by order questions; empty: not an event
    later: tuple[Step, ...] = ()  # a chain: this second script goes in a later session
