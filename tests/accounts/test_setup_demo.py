"""``setup_demo`` (``make run``'s greeting) prints the address the server serves on."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from accounts.management.commands.setup_demo import served_url


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("127.0.0.1", "8000", "http://127.0.0.1:8000/"),
        ("0.0.0.0", "9123", "http://127.0.0.1:9123/"),  # noqa: S104
        ("::", "8080", "http://[::1]:8080/"),
        ("localhost", 8001, "http://localhost:8001/"),
        ("[::1]", "8002", "http://[::1]:8002/"),
    ],
)
def test_the_greeting_names_the_served_address(host, port, url):
    assert served_url(host, port) == url


@pytest.mark.django_db
def test_setup_demo_prints_its_host_and_port(settings):
    settings.DEBUG = True
    out = StringIO()
    call_command("setup_demo", "--host", "0.0.0.0", "--port", "9123", stdout=out)  # noqa: S104
    assert "Forge demo login: http://127.0.0.1:9123/  user 'demo'" in out.getvalue()
    settings.DEBUG = False
    with pytest.raises(CommandError):
        call_command("setup_demo", stdout=StringIO())


@pytest.mark.django_db
@pytest.mark.parametrize("port", ["abc", "99999", "0", "-1"])
def test_a_port_that_is_none_is_refused(settings, port):
    """A third-round finding: it printed ``http://127.0.0.1:abc/``."""
    settings.DEBUG = True
    with pytest.raises(CommandError, match="--port must be a port number"):
        call_command("setup_demo", "--port", port, stdout=StringIO())
