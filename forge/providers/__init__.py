"""Model providers, chosen by ``provider/model`` strings (``offline/echo``, ``openai/gpt-4o``).

:func:`resolve` returns the provider for a model string; settings are read when
it is called, never at import.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from forge.errors import UnknownModel

from .base import ModelRequest, Provider, ToolSpec

__all__ = ["ModelRequest", "Provider", "ToolSpec", "UnknownModel", "register", "resolve"]


_factories: dict[str, Callable[[str], Provider]] = {}


def register(provider: str, factory: Callable[[str], Provider]) -> None:
    """Make ``provider/<model>`` strings resolve through ``factory(model)``."""
    _factories[provider] = factory


def _offline(model: str) -> Provider:
    from .offline import EchoProvider, ScriptProvider

    if model == "echo":
        return EchoProvider(model, delay=settings.FORGE_ECHO_DELAY)
    if model == "script":
        return ScriptProvider(model, path=settings.FORGE_SCRIPT or None)
    raise UnknownModel(f"offline models are 'echo' and 'script', not {model!r}")


def _openai(model: str) -> Provider:
    from .openai import OpenAIProvider

    return OpenAIProvider.from_settings(model)


register("offline", _offline)
register("openai", _openai)


def split_model(model: str) -> tuple[str, str]:
    provider, _, name = model.partition("/")
    if not provider or not name:
        raise UnknownModel(f"a model is 'provider/model', not {model!r}")
    return provider, name


def check_model(model: str) -> None:
    """``UnknownModel`` unless ``model`` is ``provider/model`` for a registered provider,
    its name printable and unspaced, with no empty segment between slashes (what an
    agent's model is checked against when it is saved: any string was taken, and
    failed every turn of the agent). A name may hold slashes (``openai/org/model``, as
    OpenRouter names models)."""
    provider, name = split_model(model)
    if provider not in _factories:
        raise UnknownModel(f"unknown provider {provider!r}; known: {sorted(_factories)}")
    if not name.isprintable() or any(char.isspace() for char in name):
        raise UnknownModel(f"a model's name has no spaces or control characters: {name!r}")
    if "" in name.split("/"):
        raise UnknownModel(f"a model's name has no empty segment between slashes: {name!r}")


def resolve(model: str) -> Provider:
    provider, name = split_model(model)
    factory = _factories.get(provider)
    if factory is None:
        raise UnknownModel(f"unknown provider {provider!r}; known: {sorted(_factories)}")
    return factory(name)
