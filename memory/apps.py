from django.apps import AppConfig


class MemoryConfig(AppConfig):
    """Long-term memory: MemoryCore → MemoryUnit → MemorySlice, DialogRolling, retrieval."""

    name = "memory"
    verbose_name = "Long-term memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import after_rolling, search

        # The built-in AfterRolling consumer: keep the full-text index current.
        after_rolling.register(search.index_consumer)
