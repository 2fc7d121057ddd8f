"""WSGI entry (admin and API only; streaming needs ASGI: ``forge.asgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forge.settings.dev")
application = get_wsgi_application()
