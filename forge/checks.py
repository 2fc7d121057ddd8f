"""Forge's system checks, and the start-up check of a serving process.

Static files: with ``DEBUG`` off, pages name their static files by the hashed
names of ``collectstatic``'s manifest (``forge.storage``). Without the manifest
every page that names one (``/``, ``/login/``, the admin) is a 500. A serving
process refuses to start instead (:func:`require_collected_static`, called by
``forge.asgi`` and ``forge.wsgi``), and ``manage.py check --deploy`` reports it.
It is a deploy check, not a check of every command: ``migrate`` may run before
``collectstatic``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.storage import ManifestFilesMixin, staticfiles_storage
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def static_files_problem() -> str | None:
    """Why pages cannot be served with the static files as they are, or None."""
    if settings.DEBUG or not isinstance(staticfiles_storage, ManifestFilesMixin):
        return None
    if staticfiles_storage.read_manifest() is None:
        return (
            f"static files are not collected: {settings.STATIC_ROOT}/"
            f"{staticfiles_storage.manifest_name} is missing, so every page would answer 500. "
            "Run `manage.py collectstatic --noinput` (with the same settings) before serving."
        )
    return None


@checks.register(checks.Tags.staticfiles, deploy=True)
def check_static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[checks.Error]:
    problem = static_files_problem()
    if problem is None:
        return []
    return [checks.Error(problem, id="forge.E001")]


def require_collected_static() -> None:
    """Refuse to serve (``ImproperlyConfigured``) when pages could not be rendered."""
    problem = static_files_problem()
    if problem is not None:
        raise ImproperlyConfigured(problem)
