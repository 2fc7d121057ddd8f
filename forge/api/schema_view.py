"""``/api/schema/``: drf-spectacular's schema view, the schema generated once per
process (and language and version) and each of its formats rendered once.

The schema is public (the docs page reads it, logged in or not) and the same for
everyone: it depends on the code alone. Generated and rendered on every request, it
cost ~0.1 s of CPU (55 ms to generate, 30 ms more as YAML), and DRF's per-address rate
let one address keep a server's cores busy with anonymous GETs (QA).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import translation
from drf_spectacular.renderers import (
    OpenApiJsonRenderer,
    OpenApiJsonRenderer2,
    OpenApiYamlRenderer,
    OpenApiYamlRenderer2,
)
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response
from rest_framework.settings import api_settings

# (language, version) → the schema; (the schema's id, renderer class) → its bytes. The
# schemas are kept for the process's life, so an id here is never another object's.
_schemas: dict[tuple[str | None, str | None], dict[str, Any]] = {}
_rendered: dict[tuple[int, type], bytes] = {}


class _RenderedOnce:
    """A renderer that renders each kept schema once (any other data as usual: an error
    answer is rendered by the same class)."""

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        # A media type with parameters (DRF's ``Accept: …; indent=N``) is rendered as
        # asked, each time: the first answer's bytes were every later one's (QA).
        if ";" in str(accepted_media_type or "") or not any(
            data is schema for schema in _schemas.values()
        ):
            return super().render(data, accepted_media_type, renderer_context)  # type: ignore[misc]
        key = (id(data), type(self))
        if key not in _rendered:
            _rendered[key] = super().render(data, accepted_media_type, renderer_context)  # type: ignore[misc]
        return _rendered[key]


class YamlRenderer(_RenderedOnce, OpenApiYamlRenderer):
    pass


class YamlRenderer2(_RenderedOnce, OpenApiYamlRenderer2):
    pass


class JsonRenderer(_RenderedOnce, OpenApiJsonRenderer):
    pass


class JsonRenderer2(_RenderedOnce, OpenApiJsonRenderer2):
    pass


class SchemaView(SpectacularAPIView):
    renderer_classes = [YamlRenderer, YamlRenderer2, JsonRenderer, JsonRenderer2]

    def _get_schema_response(self, request: Any) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (translation.get_language(), version)
        schema = _schemas.get(key)
        if schema is None:
            generator = self.generator_class(
                urlconf=self.urlconf, api_version=version, patterns=self.patterns
            )
            schema = generator.get_schema(request=request, public=self.serve_public)
            if _kept(*key):
                schema = _schemas.setdefault(key, schema)
        filename = self._get_filename(request, version)
        return Response(
            data=schema, headers={"Content-Disposition": f'inline; filename="{filename}"'}
        )


def _kept(language: str | None, version: str | None) -> bool:
    """Whether a schema of this language and version is kept: the server's own language
    (or none active) and no version or an allowed one. The key comes from the query
    (``?lang=``, ``?version=``: any value when no ``ALLOWED_VERSIONS`` are set), and each
    new one kept a schema and its renderings for the process's life: anonymous GETs grew
    its memory without bound (QA). Any other is generated for its request, as before."""
    versions = api_settings.ALLOWED_VERSIONS or ()
    return language in (None, settings.LANGUAGE_CODE) and (version is None or version in versions)
