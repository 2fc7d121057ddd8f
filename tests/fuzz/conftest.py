from tests.api.conftest import token  # noqa: F401 - shared fixtures
