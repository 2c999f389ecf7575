"""A `Store` on each database the server host runs on: the fixture `database` is a URL, once a SQLite file in the
test's folder and once a fresh PostgreSQL database (tests/support/services.py), so one test checks both.

    async def test_x(database):  # registered by tests/server/conftest.py
        store = await open_store(database)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from runtime.store.db import migrate_url
from runtime.store.repo import Store


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hearth.sqlite3'}"
    return request.getfixturevalue("postgres_url")


async def open_store(url: str) -> Store:
    """The store on the database at `url`, migrated to the head."""
    await migrate_url(url)
    if url.startswith("sqlite"):
        return await Store.open(Path(make_url(url).database or "").parent)
    return Store(create_async_engine(url), Path())
