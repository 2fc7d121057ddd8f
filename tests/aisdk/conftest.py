from tests.api.conftest import stranger_token, token  # noqa: F401 - shared fixtures
from tests.runtime.conftest import script  # noqa: F401 - shared fixtures
