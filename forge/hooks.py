"""Plugin hooks.

``text_complete``: post-process a finished text part before it is written (after
trailing white space is trimmed). Register a function taking the text and a
:class:`TextContext` and returning the text to store::

    from forge import hooks

    @hooks.text_complete.register
    def no_shouting(text: str, context: hooks.TextContext) -> str:
        return text.replace("!!!", "!")

Hooks run in registration order, each on the previous one's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TextContext:
    session_id: str
    message_id: str
    part_id: str
    agent: str


TextHook = Callable[[str, TextContext], str]


class _TextComplete:
    def __init__(self) -> None:
        self._hooks: list[TextHook] = []

    def register(self, hook: TextHook) -> TextHook:
        if hook not in self._hooks:
            self._hooks.append(hook)
        return hook

    def unregister(self, hook: TextHook) -> None:
        if hook in self._hooks:
            self._hooks.remove(hook)

    def __call__(self, text: str, context: TextContext) -> str:
        for hook in self._hooks:
            text = hook(text, context)
            if not isinstance(text, str):
                raise TypeError(f"text_complete hook {hook!r} returned {type(text).__name__}")
        return text


text_complete = _TextComplete()
