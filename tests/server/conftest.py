"""The server host's tests run against a real Redis and a real PostgreSQL (tests/support/services.py); `database`
is a URL, once of SQLite and once of PostgreSQL (tests/support/stores.py)."""

import pytest

from tests.support.server_box import box, model  # noqa: F401  (fixtures)
from tests.support.services import (  # noqa: F401  (fixtures)
    own_redis,
    postgres_bindir,
    postgres_server,
    postgres_url,
    redis_binary,
    redis_client,
    redis_server,
    redis_url,
)
from tests.support.stores import database  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def _servers_start_before_any_test(request):
    """Start the installed servers with the session, before any test's fixtures: started inside the first async
    test that needs one (~1 s under load), the start would count as event-loop lag for tests/conftest.py's
    watchdog, which is already ticking, and fail that test. A missing server is left to the tests that need it
    (skipped, or failed in CI)."""
    if postgres_bindir():
        request.getfixturevalue("postgres_server")
    if redis_binary():
        request.getfixturevalue("redis_server")
