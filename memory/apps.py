from django.apps import AppConfig


class MemoryConfig(AppConfig):
    """Long-term memory (MemoryCore → MemoryUnit → MemorySlice); filled by the memory issue."""

    name = "memory"
    verbose_name = "Long-term memory"
    default_auto_field = "django.db.models.BigAutoField"
