from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import lookups
        from .tokens import hide_keys

        hide_keys()
        lookups.install()
