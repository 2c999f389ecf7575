"""The databases the server host runs on: the fixture `database` is a URL, once of a SQLite file in the test's
folder and once of a fresh PostgreSQL database (tests/support/services.py), so one test checks both.

    async def test_x(database):  # registered by tests/server/conftest.py
        store = await Store.open_url(database)
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hearth.sqlite3'}"
    return request.getfixturevalue("postgres_url")
