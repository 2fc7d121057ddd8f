"""What a step the model is serving has cost so far (:class:`StepMeter`): what a step cut
by an abort bills (docs/operations.md, "What a stopped reply costs").

The provider bills what it was sent and what it streamed, finished or not; unbilled,
an aborted reply cost nothing, and stopping every reply went past any budget (QA,
HIGH). So the Processor keeps, per step, the request (set by the loop before the
model is asked), whether the model is serving it, the characters streamed, and the
provider's count once the step's finish is in hand.

**A step is open** (billed if cut) from its step-start being held until its
``finish-step`` is in hand, except while a retry is pending (the request is not
served until the retry's first event) and once the provider refused it or broke it
off (an error, a stream that ended early): those bill nothing. A cut before the
step-start was held logged a step-finish with no step-start (review).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forge.providers import events as ev


@dataclass
class StepResult:
    """How a step finished, and what the provider counted of it."""

    finish_reason: str
    usage: ev.Usage
    cost: float
    error: ev.Error | None = None


@dataclass
class StepMeter:
    """The current step's bill. ``calls``: the tool calls its stream opened."""

    request: Any = None
    started: bool = False  # the step's step-start is held
    open: bool = False  # the model is serving it: a cut bills it
    output_chars: int = 0  # of its blocks closed so far
    call_chars: int = 0  # the arguments of its complete calls
    input_chars: dict[str, int] = field(default_factory=dict)  # of calls still streaming
    usage: ev.Usage | None = None  # the provider's count, once its finish is in hand
    calls: int = 0

    def begin(self) -> None:
        """A new step's stream (no step-start held yet)."""
        self.started = False

    def start(self) -> None:
        """The step's step-start is held: counted from zero, open."""
        self.calls = self.output_chars = self.call_chars = 0
        self.input_chars, self.usage = {}, None
        self.started = self.open = True

    def pause(self) -> None:
        """A retry is pending, or the provider refused or broke the step off: billed
        nothing while so (a retry's first event reopens it: :meth:`resume`)."""
        self.open = False

    def resume(self) -> None:
        """The retried request is served again."""
        self.open = self.started and self.request is not None

    def close(self) -> None:
        """The step ended (its finish in hand, or refused for good): nothing left to cut."""
        self.open, self.request = False, None

    def input_delta(self, call_id: str, chars: int) -> None:
        """Streamed arguments are output the provider bills (a long ``write_file``)."""
        self.input_chars[call_id] = self.input_chars.get(call_id, 0) + chars

    def call(self, call_id: str, chars: int) -> None:
        """A complete call: its arguments counted whole, once."""
        self.calls += 1
        self.input_chars.pop(call_id, None)
        self.call_chars += chars

    def cut(self, estimate: Callable[[Any], int], *, streaming: int) -> ev.Usage | None:
        """What the step bills if cut now, and closes it; None if not open. The
        provider's count if the finish is in hand, else estimated: the request's
        (``estimate``: characters / 4, as compaction estimates them) in; the text,
        reasoning and call arguments streamed (``streaming``: of blocks still open),
        / 4, out."""
        if not self.open or self.request is None:
            return None
        usage = self.usage
        if usage is None:
            streamed = (
                self.output_chars + streaming + self.call_chars + sum(self.input_chars.values())
            )
            usage = ev.Usage(input=estimate(self.request), output=streamed // 4)
        self.close()
        return usage
