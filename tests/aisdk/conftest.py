import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import stranger_token, token  # noqa: F401 - shared fixtures
from tests.live import daphne
from tests.runtime.conftest import script  # noqa: F401 - shared fixtures


@pytest.fixture
def asking(tmp_path: Path, agents: Any) -> Any:
    """A daphne whose rules ask before ``list_files`` runs (the approval tests)."""
    with daphne(
        tmp_path,
        "echo",
        FORGE_ECHO_DELAY="0.001",
        FORGE_TOOL_APPROVAL=json.dumps({"list_files": "ask"}),
    ) as live:
        yield live
