"""ASGI entry: ``daphne forge.asgi:application``."""

import logging
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge.settings.dev")
# Django must be set up before anything imports models.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from accounts import tenancy  # noqa: E402
from forge.checks import require_collected_static  # noqa: E402
from forge.db.postgresql.base import serve_as_app  # noqa: E402

require_collected_static()  # DEBUG off: refuse to start rather than answer 500 on every page
serve_as_app()  # PostgreSQL: act as FORGE_DB_APP_ROLE, under row-level security

from forge import server_limits  # noqa: E402

server_limits.install()  # daphne refuses a body over its route's limit as it arrives

from forge.realtime import slow_clients  # noqa: E402

slow_clients.install()  # daphne's sends wait for a slow client; a stalled one is cut

if settings.FORGE_RECOVER_ON_START:
    # Turns a crashed process left open are finalized before serving (sessions
    # another live process runs hold a live lease and are left alone).
    from forge.runtime import recover_sessions

    try:
        with tenancy.scope(tenancy.ALL):
            recovered = recover_sessions()
        if recovered:
            logging.getLogger("forge").info("recovered %d session(s) at start-up", len(recovered))
    except Exception:
        logging.getLogger("forge").exception("recovering sessions at start-up failed")

# Every serving process watches for leases that expire from now on (a runner
# killed just before this process started holds one that has not expired yet).
from forge.runtime import start_janitor  # noqa: E402

start_janitor()

from forge.runtime.shutdown import on_daphne_shutdown  # noqa: E402

on_daphne_shutdown()  # SIGTERM: running turns finish, or end as aborted, before exit

from channels.routing import URLRouter  # noqa: E402

from forge.nul import RefuseNulSockets  # noqa: E402
from forge.realtime.auth import SocketAuthStack  # noqa: E402
from forge.realtime.frame_limit import close_oversized_cleanly  # noqa: E402
from forge.realtime.origin import SameOriginValidator  # noqa: E402
from forge.realtime.routing import websocket_urlpatterns  # noqa: E402

close_oversized_cleanly()  # under daphne: an oversized socket frame gets close 1009

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": RefuseNulSockets(
            SameOriginValidator(SocketAuthStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
