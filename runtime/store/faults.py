"""The one place where sqlite3, SQLAlchemy and OS errors of the database become Hearth's own `StorageError`s.

`install(engine, home)` hooks SQLAlchemy's `handle_error`, so every statement, commit and connect of the store
raises `StorageFull`, `StorageCorrupt`, `StorageReadOnly` or `StorageUnavailable` instead of a library error
with a link to its docs; `guard(home)` does the same for code outside an engine (the data-folder lock, the
backup API). Errors that are not faults of the storage (a constraint, a programming error) pass unchanged.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import StorageCorrupt, StorageError, StorageFull, StorageReadOnly, StorageUnavailable

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Dialect, ExceptionContext
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

# SQLite's primary result codes (the low byte of an extended code).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 3, 5, 6, 8, 10, 11, 13, 14, 26
_NEARLY_FULL = 1 << 20  # bytes: an I/O error with less free space than this is a full disk


def full(home: Path) -> StorageFull:
    return StorageFull(f"The disk that holds Hearth's data ({home}) is full, so Hearth cannot save anything. "
                       "Free some space on it, then try again.", str(home))


def corrupt(home: Path) -> StorageCorrupt:
    return StorageCorrupt(f"Hearth's database in {home} is damaged and cannot be read. Restore the latest "
                          "backup, or choose another data folder.", str(home))


def failed_check(home: Path) -> StorageCorrupt:
    return StorageCorrupt(f"Hearth checked its database in {home} and found it damaged. Restore the latest "
                          "backup, or choose another data folder.", str(home))


def read_only(home: Path) -> StorageReadOnly:
    return StorageReadOnly(f"Hearth cannot write to its data folder {home} (it is read-only or belongs to "
                           "someone else). Make it writable, or choose another data folder.", str(home))


def unavailable(home: Path, why: str) -> StorageUnavailable:
    return StorageUnavailable(f"Hearth cannot use its database in {home}: {why}", str(home))


def _nearly_full(home: Path) -> bool:
    try:
        return shutil.disk_usage(home).free < _NEARLY_FULL
    except OSError:
        return False


def _writable(home: Path) -> bool:
    """False for a read-only mount or an immutable folder (also for root, unlike permission bits)."""
    return os.access(home, os.W_OK)


def storage_error(exc: BaseException, home: Path) -> StorageError | None:
    """The StorageError `exc` means, or None when it is not a fault of the storage."""
    if isinstance(exc, StorageError):
        return exc
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        code = (getattr(orig, "sqlite_errorcode", None) or 0) & 0xFF
        if code == _FULL or (code == _IOERR and _nearly_full(home)):
            return full(home)
        if code in (_CORRUPT, _NOTADB):
            return corrupt(home)
        if code in (_READONLY, _PERM) or (code == _CANTOPEN and not _writable(home)):
            return read_only(home)
        if code == _CANTOPEN:
            return unavailable(home, "the database file cannot be opened. Check that the folder exists and is "
                                     "writable, or choose another data folder.")
        if code == _IOERR:
            return unavailable(home, "reading or writing the disk failed. Check that the disk is connected and "
                                     "working, then try again.")
        if code in (_BUSY, _LOCKED):
            return unavailable(home, "another program keeps it locked. Close that program, then try again.")
        return None
    if isinstance(orig, OSError) and orig.errno is not None:
        if orig.errno in (errno.ENOSPC, errno.EDQUOT):
            return full(home)
        if orig.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return read_only(home)
        return unavailable(home, f"{orig.strerror or 'the disk failed'}. Check the folder and the disk, then "
                                 "try again.")
    return None


def install(engine: AsyncEngine, home: Path) -> None:
    """Make every database error of `engine` that is a storage fault raise a StorageError."""

    def translate(ctx: ExceptionContext) -> StorageError | None:
        return storage_error(ctx.original_exception, home)

    event.listen(engine.sync_engine, "handle_error", translate)


def unreachable(where: str) -> StorageUnavailable:
    return StorageUnavailable(f"Hearth cannot reach the database {where}: nothing answers there. Check that "
                              "PostgreSQL runs and that the address is right.", where)


def refused(where: str, why: object) -> StorageUnavailable:
    """The database server answered and said no (no such database or role, a wrong password, starting up)."""
    return StorageUnavailable(f"Hearth cannot use the database {where}: {why}.", where)


def install_server(engine: AsyncEngine, where: str) -> None:
    """The server host's PostgreSQL: a connection that cannot be made or is lost raises StorageUnavailable
    (`where` names the database) instead of a driver's error. asyncpg's own OSError at connect never reaches
    `handle_error`, so connecting goes through here too."""

    def translate(ctx: ExceptionContext) -> StorageError | None:
        if ctx.is_pre_ping:  # the pool replaces the connection itself
            return None
        if ctx.is_disconnect:
            return StorageUnavailable(f"Hearth lost its connection to the database {where}. Check that PostgreSQL "
                                      "runs, then try again.", where)
        if ctx.connection is None and isinstance(ctx.sqlalchemy_exception, DBAPIError):
            return refused(where, ctx.original_exception)
        return None

    def connect(dialect: Dialect, _record: ConnectionPoolEntry, cargs: tuple[Any, ...],
                cparams: dict[str, Any]) -> DBAPIConnection:
        try:
            return dialect.connect(*cargs, **cparams)
        except OSError:  # refused, no route, timed out
            raise unreachable(where) from None

    event.listen(engine.sync_engine, "handle_error", translate)
    event.listen(engine.sync_engine, "do_connect", connect)


def refuse_commits(engine: AsyncEngine, error: Callable[[], StorageError]) -> None:
    """From now on every commit of `engine` raises `error()` and its transaction rolls back: once the database
    is known to be damaged nothing more goes into it, where a restore would set it aside unseen."""

    def refuse(_conn: Connection) -> None:
        raise error()

    event.listen(engine.sync_engine, "commit", refuse)


@contextmanager
def guard(home: Path) -> Iterator[None]:
    """Turn storage faults raised inside the block (outside an engine too) into StorageErrors."""
    try:
        yield
    except StorageError:
        raise
    except (sqlite3.Error, DBAPIError, OSError) as exc:
        mapped = storage_error(exc, home)
        if mapped is None:
            raise
        raise mapped from exc
