from django.apps import AppConfig


class ForgeConfig(AppConfig):
    """The runtime's own models: agents (configuration) and session leases."""

    name = "forge"
    verbose_name = "Agent runtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from importlib import import_module

        from django.conf import settings

        # Register the system checks, and the built-in tools: the workspace tools and
        # the task tool.
        from forge import checks, tools  # noqa: F401
        from forge.runtime import subtask  # noqa: F401

        # A deleted session's uploads and workspace go with it; a fork or an import's
        # copy carries the files its parts name.
        from forge.runtime.files import on_part_copying, on_session_deleted
        from sessions.signals import part_copying, session_deleted

        session_deleted.connect(on_session_deleted, dispatch_uid="forge.session-files")
        part_copying.connect(on_part_copying, dispatch_uid="forge.carry-files")

        # A copy made after a rolling keeps the rolled turns cut from the model's view.
        from forge.runtime.dialogue import on_history_copied
        from sessions.signals import history_copied

        history_copied.connect(on_history_copied, dispatch_uid="forge.copy-rolled-cut")

        # What a deleted log had counted stays counted, through rebuild_usage too.
        from forge.usage.services import on_session_deleting
        from sessions.signals import session_deleting

        session_deleting.connect(on_session_deleting, dispatch_uid="forge.usage-retire")

        # An imported log's open replies end as interrupted (nothing runs them here),
        # in the import's transaction; an import bills nothing, neither its log's
        # replies nor that ending (they ran elsewhere: ``Session.copied_through``,
        # ``forge.usage.fold``). First of all, an import whose session names no agent
        # here is refused (400 unknown_agent, nothing written), as PATCH refuses one.
        from forge.runtime.agents import on_session_imported as check_imported_agent
        from forge.runtime.recovery import on_session_imported as finalize_imported
        from sessions.signals import session_imported

        session_imported.connect(check_imported_agent, dispatch_uid="forge.import-agent")
        session_imported.connect(finalize_imported, dispatch_uid="forge.import-finalize")

        # Rolling's metrics: the memory store says what its sweeps did.
        from forge.telemetry.metrics import rollings_done
        from memory.signals import rollings_done as rollings_signal

        rollings_signal.connect(rollings_done, dispatch_uid="forge.rolling-metrics")

        # Traces, when an OTLP endpoint is set (forge.telemetry.tracing).
        from forge.telemetry import tracing

        tracing.configure(
            enabled=settings.FORGE_OTEL, capture_content=settings.FORGE_OTEL_CAPTURE_CONTENT
        )

        # Plugins: modules that register tools, hooks or providers when imported.
        for module in settings.FORGE_PLUGINS:
            import_module(module)
