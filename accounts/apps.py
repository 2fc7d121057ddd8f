from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and tenants"
    default_auto_field = "django.db.models.BigAutoField"
