"""The memory recall dataset: generated (``generate``) or read from a file of LoCoMo's
shape (``load``), flattened into what the benchmark needs (``dialogues``).

A sample is ``{sample_id, conversation: {speaker_a, speaker_b, session_N: [{speaker,
dia_id, text, blip_caption?}], session_N_date_time}, qa: [{question, answer?, evidence:
[dia_id …], category}]}``, as in LoCoMo (Maharana et al., 2024); generated samples add
``language``, and ``kind`` and ``fact`` per question.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .generate import generate

__all__ = ["Dialogue", "Question", "dialogues", "generate", "load"]

KINDS = {1: "multi", 2: "temporal", 3: "open", 4: "single", 5: "adversarial"}
_DIA = re.compile(r"D(\d+):(\d+)")
_TIME = re.compile(r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.I)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["january", "february", "march", "april", "may", "june", "july", "august",
         "september", "october", "november", "december"],
        1,
    )
}  # fmt: skip
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    evidence: tuple[int, ...]  # positions of evidence messages in the dialogue
    kind: str  # single, multi, temporal, open, adversarial
    fact: str = ""


@dataclass(frozen=True)
class Dialogue:
    sample_id: str
    language: str  # "en", "zh"
    messages: list[dict[str, Any]]  # {role, text, at, session}: speaker_a is the user
    questions: list[Question]


def load(path: str | Path) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data if isinstance(data, list) else [data]


def session_time(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` (LoCoMo) as a UTC time."""
    found = _TIME.search(text or "")
    if not found:
        raise ValueError(f"not a LoCoMo session time: {text!r}")
    hour, minute, half, day, month, year = found.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), _MONTHS[month.lower()], int(day), h, int(minute), tzinfo=UTC)


def _dia(text: str) -> list[tuple[int, int]]:
    return [(int(s), int(t)) for s, t in _DIA.findall(str(text))]


def dialogues(samples: list[dict[str, Any]], *, kinds: set[str] | None = None) -> list[Dialogue]:
    """Each sample as one dialogue: its sessions' turns in order, one message each (speaker
    A → ``user``, B → ``assistant``; a shared image's caption appended as LoCoMo's own
    baselines do), a minute apart from the session's time; its questions with evidence
    resolved to message positions. Questions of other ``kinds`` (default: all but LoCoMo's
    adversarial ones, whose answer is not in the dialogue) and questions whose evidence
    names no turn are left out."""
    kinds = kinds or {"single", "multi", "temporal", "open"}
    out: list[Dialogue] = []
    for sample in samples:
        conv = sample["conversation"]
        messages: list[dict[str, Any]] = []
        position: dict[tuple[int, int], int] = {}
        n = 1
        while f"session_{n}" in conv:
            start = session_time(conv.get(f"session_{n}_date_time", ""))
            for i, turn in enumerate(conv[f"session_{n}"]):
                text = str(turn.get("text", ""))
                if turn.get("blip_caption"):
                    text = f"{text} [shares {turn['blip_caption']}]".strip()
                for key in _dia(turn.get("dia_id", "")):
                    position[key] = len(messages)
                messages.append(
                    {
                        "role": "user" if turn.get("speaker") == conv["speaker_a"] else "assistant",
                        "text": text,
                        "at": (start + timedelta(minutes=i)).isoformat(),
                        "session": n,
                    }
                )
            n += 1
        questions = []
        for qa in sample.get("qa", []):
            kind = qa.get("kind") or KINDS.get(int(qa.get("category", 4)), "single")
            evidence = tuple(
                sorted(
                    {position[k] for e in qa.get("evidence", []) for k in _dia(e) if k in position}
                )
            )
            if kind not in kinds or not evidence:
                continue
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            questions.append(
                Question(str(qa["question"]), str(answer), evidence, kind, qa.get("fact", ""))
            )
        language = sample.get("language") or _language(messages)
        out.append(Dialogue(str(sample.get("sample_id", len(out))), language, messages, questions))
    return out


def _language(messages: list[dict[str, Any]]) -> str:
    text = "".join(m["text"] for m in messages[:200])
    return "zh" if len(_CJK.findall(text)) > len(text) / 5 else "en"
