"""WSGI entry (admin and API only; streaming needs ASGI: ``forge.asgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge.settings.dev")
application = get_wsgi_application()

from forge.checks import require_collected_static  # noqa: E402
from forge.db.postgresql.base import serve_as_app  # noqa: E402

require_collected_static()  # DEBUG off: refuse to start rather than answer 500 on every page
serve_as_app()  # PostgreSQL: act as FORGE_DB_APP_ROLE, under row-level security
