from typing import Any

from django.apps import AppConfig

# Settings after whose change (tests, ``override_settings``) the process's embedder
# and its cached vectors are forgotten.
EMBEDDING_SETTINGS = frozenset(
    {"FORGE_MEMORY_EMBEDDER", "FORGE_EMBEDDING_MODEL", "FORGE_MEMORY_VECTORS"}
)


def forget_embedder(*, setting: str, **kwargs: Any) -> None:
    if setting in EMBEDDING_SETTINGS:
        from .embeddings import reset_embedder
        from .search import forget_failures
        from .vectors import cache

        reset_embedder()
        cache.clear()
        forget_failures()


class MemoryConfig(AppConfig):
    """Long-term memory: MemoryCore → MemoryUnit → MemorySlice, DialogRolling, retrieval."""

    name = "memory"
    verbose_name = "Long-term memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.test.signals import setting_changed

        from . import after_rolling, digest, indexing

        # The built-in AfterRolling consumers: keep the search index current, and fold
        # what the dialog_history block has no room for into the core's digest.
        after_rolling.register(indexing.consumer)
        after_rolling.register(digest.consumer)
        setting_changed.connect(forget_embedder, dispatch_uid="memory.forget_embedder")
