from django.apps import AppConfig


class SessionsConfig(AppConfig):
    # ``sessions`` would collide with ``django.contrib.sessions``, which stays installed.
    name = "sessions"
    label = "forge_sessions"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"
