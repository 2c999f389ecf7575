"""Engine, pragmas and migrations.

WAL (readers never wait for the writer), foreign keys on, `synchronous=FULL` so a committed input
survives power loss, and a busy timeout so concurrent writers queue instead of failing. Alembic runs at
every open, on the async engine's connection (a plain `command.upgrade()` inside a running loop fails).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

MIGRATIONS = Path(__file__).with_name("migrations")


def _pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=FULL", "busy_timeout=10000"):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def make_engine(path: Path) -> AsyncEngine:
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    event.listen(engine.sync_engine, "connect", _pragmas)
    return engine


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _upgrade(sync_conn, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, revision)


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_upgrade, revision)
