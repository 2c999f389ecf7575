"""The server host's tests run against a real Redis and a real PostgreSQL (tests/support/services.py)."""

from tests.support.services import postgres_server, postgres_url, redis_server, redis_url  # noqa: F401
