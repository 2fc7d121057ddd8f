from django.apps import AppConfig


class ForgeConfig(AppConfig):
    """The runtime's own models: agents (configuration) and session leases."""

    name = "forge"
    verbose_name = "Agent runtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the built-in tools: the workspace tools and the task tool.
        from forge import tools  # noqa: F401
        from forge.runtime import subtask  # noqa: F401
