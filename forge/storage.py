"""Static files storage: WhiteNoise's compressed manifest storage, with the chat page's
ES module imports rewritten to their hashed names (so a browser never mixes the
modules of two deploys)."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class ForgeStaticFilesStorage(CompressedManifestStaticFilesStorage):
    support_js_module_import_aggregation = True
