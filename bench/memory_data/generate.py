"""Generate the recall dataset: long two-person conversations with planted facts.

Each conversation is built from one language pack (``en`` or ``zh``) and one seeded
``random.Random``, so the same seed gives the same file on any machine:

* two speakers and ~20 dated sessions of ~20-26 messages each (greeting, blocks,
  goodbye; the speakers alternate, a short bridge line is put between two blocks
  that would make one speaker talk twice);
* ~15 facts of different types and two chains (a fact whose second half comes in a
  later session), each said by one speaker (the *owner*), its evidence lines known;
* distractors: lines in other sessions that mention the same entities (the place,
  the pet's breed, the company …) without answering any question;
* filler: everyday talk that reuses the same vocabulary (half the time the very
  values the facts use), so no keyword is unique to its evidence;
* questions that name the owner and paraphrase the evidence (a slot value is what
  they share, as in LoCoMo: "When did Melanie paint a sunrise?"), single-hop,
  temporal (the answer is computed from the session's date), multi-hop (chains),
  and order questions over two events of one speaker.

The output has LoCoMo's shape (``conversation.session_N``, ``session_N_date_time``,
turns ``{speaker, dia_id, text}``, ``qa: [{question, answer, evidence, category}]``), so
the benchmark reads the public file and this one the same way.
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from . import en, zh
from .shapes import CATEGORY, FactType, Step

PACKS: dict[str, ModuleType] = {"en": en, "zh": zh}
FACTS_PER_CONVERSATION = 15
CHAINS_PER_CONVERSATION = 2
ORDER_QUESTIONS = 2
QUESTIONS_PER_FACT = 2
DISTRACTORS_PER_FACT = 2
SESSIONS = (19, 21)
SESSION_MESSAGES = (20, 26)
MIN_MESSAGES = 400
FOLD_QUESTION = 0.3  # share of Latin questions typed without accents ("Malaga")
ENTITY_BIAS = 0.5  # share of filler slots filled with a value the facts use
LEAD = 0.35  # share of evidence lines that open with a sentence of no substance
TAIL = 0.3  # share of lines that end with one

Line = tuple[int, str, tuple[int, str] | None]  # speaker (0 or 1), text, evidence key
Block = list[Line] | Callable[[int], list[Line]]  # fixed lines, or lines given who opens


def generate(*, seed: int, conversations: int = 10) -> list[dict[str, Any]]:
    """``conversations`` samples, English and Chinese alternately (en, zh, en …)."""
    return [
        conversation(seed=seed, index=i, language="en" if i % 2 == 0 else "zh")
        for i in range(conversations)
    ]


def conversation(*, seed: int, index: int, language: str) -> dict[str, Any]:
    rng = random.Random(f"forge-memory-recall:{seed}:{index}:{language}")
    return _Builder(PACKS[language], rng, f"forge-{language}-{seed}-{index}", language).build()


def fold(text: str) -> str:
    """``text`` without accents (NFKD, combining marks dropped, NFC)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return unicodedata.normalize(
        "NFC", "".join(c for c in decomposed if not unicodedata.combining(c))
    )


_ARTICLE = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])(?!u[kns]|use|uni|one|eu|UX)")


def articles(text: str) -> str:
    """English: "a" before a vowel sound is "an" ("an accountant", "a ukulele")."""
    return _ARTICLE.sub(lambda m: m.group(1) + "n ", text)


def locomo_time(at: datetime) -> str:
    """LoCoMo's ``session_N_date_time``: ``1:56 pm on 8 May, 2023``."""
    hour = at.hour % 12 or 12
    half = "am" if at.hour < 12 else "pm"
    return f"{hour}:{at.minute:02d} {half} on {at.day} {en.month(at.month - 1)}, {at.year}"


@dataclass
class _Planted:
    fid: int
    kind: str
    fact: FactType
    owner: int
    slots: dict[str, str]
    session: int
    later_session: int | None = None
    when_code: str | None = None


@dataclass
class _Session:
    at: datetime
    blocks: list[Block] = field(default_factory=list)


class _Builder:
    def __init__(self, pack: ModuleType, rng: random.Random, sample_id: str, language: str):
        self.pack, self.rng, self.sample_id, self.language = pack, rng, sample_id, language
        self.decks: dict[str, list[Any]] = {}
        self.used: dict[str, list[str]] = {}

    # --- values -----------------------------------------------------------------------

    def draw(self, key: str) -> Any:
        """A value of ``key`` not drawn before in this conversation, while any remain."""
        deck = self.decks.get(key)
        if not deck:
            deck = list(self.pack.PEOPLE if key == "person" else self.pack.VOCAB[key])
            self.rng.shuffle(deck)
            self.decks[key] = deck
        return deck.pop()

    def fill(self, fact: FactType) -> tuple[dict[str, str], str | None]:
        slots: dict[str, str] = {}
        when_code = None
        for name, spec in fact.slots.items():
            kind, _, arg = spec.partition(":")
            if kind == "vocab":
                value = self.draw(arg)
                if isinstance(value, dict):
                    slots.update(value)
                else:
                    slots[name] = value
                    self.used.setdefault(arg, []).append(value)
            elif kind == "person":
                slots[name] = self.draw("person")
            elif kind in ("int", "price", "minutes"):
                lo, hi = (int(x) for x in arg.split(":"))
                n = self.rng.randint(lo, hi)
                writer = {"int": self.pack.num, "price": self.pack.price}.get(
                    kind, self.pack.duration
                )
                slots[name] = writer(n)
            elif kind == "month":
                slots[name] = self.pack.month(self.rng.randrange(12))
            elif kind == "when":
                when_code = self.rng.choice(arg.split("|"))
                slots[name] = self.pack.WHEN[when_code]
            else:
                raise ValueError(f"unknown slot spec {spec!r}")
        return slots, when_code

    def context(
        self, speakers: list[tuple[str, str]], owner: int, slots: dict[str, str]
    ) -> dict[str, str]:
        name, gender = speakers[owner]
        ctx = {
            **slots,
            **self.pack.pronouns(gender),
            "owner": name,
            "partner": speakers[1 - owner][0],
        }
        ctx.update({f"{k}_cap": v[:1].upper() + v[1:] for k, v in list(ctx.items())})
        return ctx

    def free(self, template: str, addressee: str) -> str:
        """A filler template filled from the vocabulary, half the time with values the facts use."""
        values: dict[str, str] = {}
        for _, key, _, _ in string.Formatter().parse(template):
            if not key or key in values:
                continue
            if key == "name":
                values[key] = addressee
            elif self.used.get(key) and self.rng.random() < ENTITY_BIAS:
                values[key] = self.rng.choice(self.used[key])
            else:
                values[key] = str(self.rng.choice(self.pack.VOCAB[key]))
        return template.format(**values)

    def dress(self, text: str, *, lead: bool = False) -> str:
        """``text``, sometimes after a lead sentence (evidence lines) or before a tail."""
        glue = " " if self.pack.LATIN else ""
        if lead and self.rng.random() < LEAD:
            text = self.rng.choice(self.pack.LEADS) + glue + text
        if self.rng.random() < TAIL:
            text = text + glue + self.rng.choice(self.pack.TAILS)
        return text

    # --- blocks -------------------------------------------------------------------------

    def script(self, steps: tuple[Step, ...], planted: _Planted, ctx: dict[str, str]) -> list[Line]:
        lines: list[Line] = []
        for step in steps:
            speaker = planted.owner if step.who == "owner" else 1 - planted.owner
            text = self.dress(self.rng.choice(step.templates).format(**ctx), lead=bool(step.key))
            lines.append((speaker, text, (planted.fid, step.key) if step.key else None))
        return lines

    def filler(self, speakers: list[tuple[str, str]]) -> Block:
        """An exchange of everyday talk, opened by whichever speaker keeps the turns alternating."""
        opener, replies = self.rng.choice(self.pack.FILLER)

        def said(first: int) -> list[Line]:
            return [
                (first, self.dress(self.free(opener, speakers[1 - first][0])), None),
                (
                    1 - first,
                    self.dress(self.free(self.rng.choice(replies), speakers[first][0])),
                    None,
                ),
            ]

        return said

    def distractor(self, line: str) -> Block:
        def said(first: int) -> list[Line]:
            return [(first, line, None), (1 - first, self.rng.choice(self.pack.REACTIONS), None)]

        return said

    def assemble(self, session: _Session, speakers: list[tuple[str, str]]) -> list[Line]:
        """Greeting, the blocks in a random order, goodbye. A fact's lines have fixed
        speakers; talk and distractors are opened by whoever keeps the turns alternating,
        and a short bridge line goes where a fact's first speaker spoke last."""
        hello, reply = self.rng.choice(self.pack.GREETINGS)
        bye, bye_reply = self.rng.choice(self.pack.CLOSINGS)
        blocks = list(session.blocks)
        self.rng.shuffle(blocks)

        def exchange(opener: str, answer: str) -> Block:
            return lambda first: [
                (first, opener.format(name=speakers[1 - first][0]), None),
                (1 - first, answer.format(name=speakers[first][0]), None),
            ]

        lines: list[Line] = []
        for block in [exchange(hello, reply), *blocks, exchange(bye, bye_reply)]:
            if callable(block):
                block = block(1 - lines[-1][0] if lines else self.rng.randrange(2))
            for line in block:
                if lines and lines[-1][0] == line[0]:
                    lines.append((1 - line[0], self.rng.choice(self.pack.BRIDGES), None))
                lines.append(line)
        return lines

    # --- the conversation ----------------------------------------------------------------

    def build(self) -> dict[str, Any]:
        rng, pack = self.rng, self.pack
        speakers: list[tuple[str, str]] = rng.sample(pack.SPEAKERS, 2)
        count = rng.randint(*SESSIONS)
        at = datetime(2022, 1, 3, tzinfo=UTC) + timedelta(
            days=rng.randrange(700), hours=rng.randint(8, 21), minutes=rng.randrange(60)
        )
        sessions: list[_Session] = []
        for _ in range(count):
            sessions.append(_Session(at))
            at += timedelta(days=rng.randint(3, 18), minutes=rng.randint(-240, 240))

        singles = [k for k, f in pack.FACTS.items() if not f.later]
        chains = [k for k, f in pack.FACTS.items() if f.later]
        kinds = rng.sample(singles, min(FACTS_PER_CONVERSATION, len(singles)))
        kinds += rng.sample(chains, min(CHAINS_PER_CONVERSATION, len(chains)))
        places = rng.sample(range(count), len(kinds) - CHAINS_PER_CONVERSATION)
        planted: list[_Planted] = []
        for fid, kind in enumerate(kinds):
            fact = pack.FACTS[kind]
            slots, when_code = self.fill(fact)
            if fact.later:
                first = rng.randrange(0, count - 4)
                item = _Planted(fid, kind, fact, rng.randrange(2), slots, first)
                item.later_session = rng.randrange(first + 3, count)
            else:
                item = _Planted(fid, kind, fact, rng.randrange(2), slots, places[fid])
            item.when_code = when_code
            planted.append(item)

        for item in planted:
            ctx = self.context(speakers, item.owner, item.slots)
            sessions[item.session].blocks.append(self.script(item.fact.script, item, ctx))
            if item.later_session is not None:
                sessions[item.later_session].blocks.append(self.script(item.fact.later, item, ctx))
            own = {item.session, item.later_session}
            others = [s for s in range(count) if s not in own]
            for s in rng.sample(others, DISTRACTORS_PER_FACT):
                line = rng.choice(item.fact.distractors).format(**ctx)
                sessions[s].blocks.append(self.distractor(line))

        for session in sessions:
            target = rng.randint(*SESSION_MESSAGES)
            while sum(len(b) if isinstance(b, list) else 2 for b in session.blocks) + 4 < target:
                session.blocks.append(self.filler(speakers))
        assembled = [self.assemble(s, speakers) for s in sessions]
        while sum(len(lines) for lines in assembled) < MIN_MESSAGES:
            s = rng.randrange(count)
            sessions[s].blocks.append(self.filler(speakers))
            assembled[s] = self.assemble(sessions[s], speakers)

        where: dict[tuple[int, str], str] = {}
        conversation: dict[str, Any] = {"speaker_a": speakers[0][0], "speaker_b": speakers[1][0]}
        for s, lines in enumerate(assembled, 1):
            conversation[f"session_{s}_date_time"] = locomo_time(sessions[s - 1].at)
            turns = []
            for t, (speaker, text, key) in enumerate(lines, 1):
                dia_id = f"D{s}:{t}"
                if key is not None:
                    where[key] = dia_id
                if self.pack.LATIN:
                    text = articles(text)
                turns.append({"speaker": speakers[speaker][0], "dia_id": dia_id, "text": text})
            conversation[f"session_{s}"] = turns

        qa = [q for item in planted for q in self.questions(item, speakers, sessions, where)]
        qa += self.order_questions(planted, speakers, where)
        if self.pack.LATIN:
            for q in qa:
                q["question"], q["answer"] = articles(q["question"]), articles(q["answer"])
        return {
            "sample_id": self.sample_id,
            "language": self.language,
            "conversation": conversation,
            "qa": qa,
        }

    def question_context(self, ctx: dict[str, str]) -> dict[str, str]:
        if self.pack.LATIN and self.rng.random() < FOLD_QUESTION:
            return {k: fold(v) for k, v in ctx.items()}
        return ctx

    def questions(
        self,
        item: _Planted,
        speakers: list[tuple[str, str]],
        sessions: list[_Session],
        where: dict[tuple[int, str], str],
    ) -> list[dict[str, Any]]:
        ctx = self.context(speakers, item.owner, item.slots)
        if item.when_code is not None:
            said_later = any("{when" in t for step in item.fact.later for t in step.templates)
            s = (
                item.later_session
                if said_later and item.later_session is not None
                else item.session
            )
            ctx["when_answer"] = self.pack.when_answer(item.when_code, sessions[s].at)
        attrs = list(item.fact.questions)
        out = []
        for attr in self.rng.sample(attrs, min(QUESTIONS_PER_FACT, len(attrs))):
            q = item.fact.questions[attr]
            out.append(
                {
                    "question": self.rng.choice(q.templates).format(**self.question_context(ctx)),
                    "answer": q.answer.format(**ctx),
                    "evidence": [where[(item.fid, key)] for key in q.evidence],
                    "category": CATEGORY[q.kind],
                    "kind": q.kind,
                    "fact": f"{item.kind}.{attr}",
                }
            )
        return out

    def order_questions(
        self,
        planted: list[_Planted],
        speakers: list[tuple[str, str]],
        where: dict[tuple[int, str], str],
    ) -> list[dict[str, Any]]:
        events = [p for p in planted if p.fact.short]
        pairs = [
            (a, b)
            for i, a in enumerate(events)
            for b in events[i + 1 :]
            if a.owner == b.owner and a.session != b.session
        ]
        out = []
        for a, b in self.rng.sample(pairs, min(ORDER_QUESTIONS, len(pairs))):
            if self.rng.random() < 0.5:
                a, b = b, a
            earlier = a if a.session < b.session else b
            shorts = {
                p.fid: p.fact.short.format(**self.context(speakers, p.owner, p.slots))
                for p in (a, b)
            }
            template = self.rng.choice(self.pack.ORDER_QUESTIONS)
            ctx = self.question_context(
                {"owner": speakers[a.owner][0], "a": shorts[a.fid], "b": shorts[b.fid]}
            )
            out.append(
                {
                    "question": template.format(**ctx),
                    "answer": shorts[earlier.fid],
                    "evidence": [where[(a.fid, "e")], where[(b.fid, "e")]],
                    "category": CATEGORY["temporal"],
                    "kind": "temporal",
                    "fact": "order",
                }
            )
        return out
