"""The server host's tests run against a real Redis and a real PostgreSQL (tests/support/services.py); `database`
is a URL, once of SQLite and once of PostgreSQL (tests/support/stores.py)."""

from tests.support.services import postgres_server, postgres_url, redis_server, redis_url  # noqa: F401
from tests.support.stores import database  # noqa: F401
