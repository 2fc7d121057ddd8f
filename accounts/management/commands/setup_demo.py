from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from rest_framework.authtoken.models import Token

from accounts.models import User
from accounts.services import create_user

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"  # noqa: S105 - a development login, refused outside DEBUG
DEMO_TENANT = "demo"


def served_url(host: str, port: str | int) -> str:
    """The URL a browser on this machine opens for a server bound to ``host:port``: a
    wildcard bind (all interfaces) is reached on the loopback address."""
    host = host.strip("[]")
    if host in ("", "0.0.0.0"):  # noqa: S104 - naming the wildcard, not binding it
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


class Command(BaseCommand):
    help = (
        "Create (once) the demo tenant and a demo superuser with a known password, and print "
        "the login. Development only: refuses to run unless DEBUG is on."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--url", help="printed login URL (default: from --host and --port)")
        parser.add_argument("--host", default="127.0.0.1", help="the address the server binds")
        parser.add_argument("--port", default="8000", help="the port the server listens on")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("setup_demo creates a known password; it runs only with DEBUG on")
        port = str(options["port"])
        if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise CommandError(f"--port must be a port number from 1 to 65535, got {port!r}")
        user = User.objects.filter(username=DEMO_USERNAME).first()
        if user is None:
            user = create_user(
                username=DEMO_USERNAME,
                tenant_name=DEMO_TENANT,
                password=DEMO_PASSWORD,
                staff=True,
                validate=False,
            ).user
            user.is_superuser = True
            user.save(update_fields=["is_superuser"])
        token, _ = Token.objects.get_or_create(user=user)
        url = options["url"] or served_url(options["host"], options["port"])
        self.stdout.write(
            self.style.SUCCESS(
                f"Forge demo login: {url}  user {DEMO_USERNAME!r}  password {DEMO_PASSWORD!r}"
                f"  (admin: {url}admin/)\nAPI token: {token.key}"
            )
        )
