"""Engine, pragmas and migrations.

WAL (readers never wait for the writer), foreign keys on, `synchronous=FULL` so a committed input
survives power loss, and a busy timeout so concurrent writers queue instead of failing. Alembic runs at an
open whose database is not at the newest revision (`head_revision`, read from the scripts without importing
alembic), on an async engine's connection (a plain `command.upgrade()` inside a running loop fails).

Migrations are atomic and resumable: each revision and its version stamp commit in one transaction, so a
crash or a kill in the middle of one leaves the database at the revision before it, and the next open
simply runs it again. Python's sqlite3 module (and aiosqlite on top of it) only opens a transaction
before INSERT/UPDATE/DELETE, so each CREATE TABLE would commit on its own; the migration engine therefore
turns that off and sends its own `BEGIN IMMEDIATE`, which SQLite's transactional DDL honours.

The server host keeps the same schema on PostgreSQL (`migrate_url`), through the same migrations: where one must
do something else there it says so and branches on the dialect (the full-text indexes: revision 0005). Its URLs
go through `database_url` (a plain `postgresql://` is asyncpg's), its engine is `server_engine`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ..errors import ConfigError, StorageUnavailable
from . import faults

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

MIGRATIONS = Path(__file__).with_name("migrations")
# pg_advisory_lock's key for migrations: any number, the same in every Hearth process on that database.
_MIGRATION_LOCK = 0x484541525448  # "HEARTH" in ASCII
_REVISION = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*(.+)$", re.MULTILINE)


def _pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cur = dbapi_conn.cursor()
    for pragma in ("journal_mode=WAL", "foreign_keys=ON", "synchronous=FULL", "busy_timeout=10000"):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def make_engine(path: Path) -> AsyncEngine:
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
    event.listen(engine.sync_engine, "connect", _pragmas)
    faults.install(engine, path.parent)
    return engine


def database_url(url: str | URL) -> URL:
    """The URL Hearth opens for a database a person wrote: PostgreSQL through asyncpg (`postgresql://` and
    `postgres://` become `postgresql+asyncpg://`), SQLite through aiosqlite (`sqlite:///PATH`). ConfigError for
    anything else, naming what to write; a password never appears in it."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError("The database URL is not one Hearth can read (it is not repeated here: it may hold a "
                          "password). Write postgresql://USER@HOST/DATABASE, or sqlite:///PATH for a file.") from None
    backend, _, driver = parsed.drivername.partition("+")
    shown = parsed.render_as_string(hide_password=True)
    if backend in ("postgresql", "postgres") and driver in ("", "asyncpg"):
        return parsed.set(drivername="postgresql+asyncpg")
    if backend == "sqlite" and driver in ("", "aiosqlite"):
        if parsed.database in (None, "", ":memory:"):
            raise ConfigError(f"The SQLite URL {shown} names no file: write sqlite:///PATH.")
        return parsed.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        raise ConfigError(f"Hearth reaches PostgreSQL through asyncpg, not {driver}: write the URL {shown} as "
                          "postgresql://… or postgresql+asyncpg://….")
    raise ConfigError(f"Hearth keeps its data in PostgreSQL (postgresql://…) or SQLite (sqlite:///PATH), not in "
                      f"{shown}.")


def describe(url: URL) -> str:
    """How a sentence names a PostgreSQL database: its name and where it is."""
    return f"{url.database} on {url.host or 'localhost'}:{url.port or 5432}"


def server_engine(url: URL) -> AsyncEngine:
    """An engine on the server host's PostgreSQL (`database_url`'s): connections checked before use, so a
    restarted server costs no failed request, and storage faults as StorageUnavailable."""
    engine = create_async_engine(url, pool_pre_ping=True)
    faults.install_server(engine, describe(url))
    return engine


def _driver_begins_nothing(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    dbapi_conn.isolation_level = None


def _begin_immediate(conn: Connection) -> None:
    # Takes the write lock at once, and makes the DDL that follows part of the transaction.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _migration_engine(url: URL) -> AsyncEngine:
    engine = create_async_engine(url, poolclass=NullPool)
    event.listen(engine.sync_engine, "connect", _pragmas)
    event.listen(engine.sync_engine, "connect", _driver_begins_nothing)
    event.listen(engine.sync_engine, "begin", _begin_immediate)
    faults.install(engine, _home(url))
    return engine


def _home(url: URL) -> Path:
    return Path(url.database or ".").parent


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _upgrade(sync_conn: Connection, revision: str) -> None:
    from alembic import command

    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, revision)


def head_revision() -> str | None:
    """The newest revision, read from the scripts' `revision = ...` / `down_revision = ...` lines without
    importing alembic (with mako and pygments ~0.15 s of every start); None when the history is not a plain
    chain (a merge, an unusual script): alembic decides then."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in (MIGRATIONS / "versions").glob("*.py"):
        found = dict(_REVISION.findall(script.read_text(encoding="utf-8")))
        if "revision" not in found:
            continue
        try:
            revision, down = ast.literal_eval(found["revision"]), ast.literal_eval(found.get("down_revision", "None"))
        except (ValueError, SyntaxError):
            return None
        if not isinstance(revision, str) or not (down is None or isinstance(down, str)):
            return None
        revisions.add(revision)
        if down is not None:
            parents.add(down)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


async def _stamped(engine: AsyncEngine) -> str | None:
    try:
        async with engine.connect() as conn:
            return (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).scalar()
    except OperationalError:  # no version table yet: a new database
        return None


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database of `engine` to `revision`, one transaction per revision (see above). A database
    already at the head is left alone without loading alembic."""
    if revision == "head" and (head := head_revision()) is not None and await _stamped(engine) == head:
        return
    from alembic.util import CommandError

    migrations = _migration_engine(engine.url)
    try:
        async with migrations.connect() as conn:
            await conn.run_sync(_upgrade, revision)
    except CommandError as exc:
        if "Can't locate revision" not in str(exc):
            raise
        raise faults.unavailable(_home(engine.url), "it was written by a newer version of Hearth. Update Hearth, "
                                                    "or choose another data folder.") from None
    finally:
        await migrations.dispose()


async def migrate_url(url: str | URL, revision: str = "head") -> None:
    """Upgrade the database at `url` to `revision`: a SQLite file (`sqlite+aiosqlite:///PATH`) as `migrate` does,
    or a PostgreSQL database (`postgresql+asyncpg://...`, the server host's). Instances and workers that start
    at once on one PostgreSQL database take turns (an advisory lock): the first migrates, the rest find the head.
    A database that cannot be reached, or was written by a newer Hearth, raises StorageUnavailable; a URL that
    is not one of these, ConfigError."""
    url = database_url(url)
    if url.get_backend_name() == "sqlite":
        engine = make_engine(Path(url.database or ""))
        try:
            await migrate(engine, revision)
        finally:
            await engine.dispose()
        return
    from alembic.util import CommandError

    where = describe(url)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        try:
            conn = await engine.connect()
        except DBAPIError as exc:  # the server answered: no such database, role, password...
            raise faults.refused(where, exc.orig) from None
        except OSError:
            raise faults.unreachable(where) from None
        try:
            await conn.run_sync(_upgrade_alone, revision)
        finally:
            await conn.close()
    except CommandError as exc:
        if "Can't locate revision" not in str(exc):
            raise
        raise StorageUnavailable(f"Hearth cannot use the database {where}: it was written by a newer version of "
                                 "Hearth. Update Hearth.", where) from None
    finally:
        await engine.dispose()


def _upgrade_alone(sync_conn: Connection, revision: str) -> None:
    # A session lock, held until this connection closes (the engine keeps none open), across the revisions'
    # own transactions; the commit leaves alembic a connection outside any transaction, as on SQLite.
    sync_conn.exec_driver_sql(f"SELECT pg_advisory_lock({_MIGRATION_LOCK})")
    sync_conn.commit()
    _upgrade(sync_conn, revision)
