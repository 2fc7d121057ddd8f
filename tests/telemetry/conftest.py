from __future__ import annotations

from tests.api.conftest import api, token  # noqa: F401 - shared fixtures
from tests.runtime.conftest import record, script  # noqa: F401 - shared fixtures
