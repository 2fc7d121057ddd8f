from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # ``sessions`` would collide with ``django.contrib.sessions``, which stays installed.
    name = "sessions"
    label = "forge_sessions"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from .recall import register_sqlite_fold

        connection_created.connect(register_sqlite_fold, dispatch_uid="sessions.recall.fold")
