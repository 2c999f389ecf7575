"""Backups (`rt.backups`, and `Backups` without an open runtime): back up, check, list and restore a data folder's
database.

`backup`, `check`, `list`, `restore` and `restore_latest` are static, taking the data folder, so the app can
offer them when `Runtime.open` failed (a damaged database) and the CLI can run them beside an app that owns the
folder. `backup`, `check` and `list` only read the database, so they work beside the owner; a restore needs the
folder to itself and raises `DataFolderBusy` otherwise. All of them run in a worker thread.
runtime/store/backup.py says how each works.

`verify_database` is the open runtime's own check, which the app runs after its start (a damaged page that the
first queries never touch is found then, not when a later query trips over it).
"""

from __future__ import annotations

import asyncio
import builtins  # `Backups.list` hides the builtin in the annotations below it
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..config import resolve_home
from ..engine.locks import DataFolderLock
from ..errors import StorageError
from ..store import backup as backups
from ..store import faults
from ..store.backup import BackupInfo, BackupNotFound, CheckReport, DatabaseCheck, Restored
from ..store.faults import guard as storage_faults
from .core import Core

log = logging.getLogger(__name__)
T = TypeVar("T")


class Backups:
    def __init__(self, core: Core):
        self._core = core
        self._check: DatabaseCheck | None = None  # verify_database's check while it runs

    def schedule_daily(self) -> None:
        """The daily backup, as a background job in a worker thread, after the open (`Runtime.open`)."""
        home = self._core.home
        try:
            due = backups.auto_backup_due(home)
        except StorageError as exc:
            log.warning("cannot look at the backups: %s", exc)
            return
        if due:
            self._core.jobs.submit("backup", None, asyncio.to_thread(backups.auto_backup, home))

    async def verify_database(self, *, force: bool = False) -> bool:
        """SQLite's quick_check of this database, at most once a day (`force`: now), in a worker thread on a
        connection of its own that reads one snapshot: neither the event loop nor a writer waits for it.
        True when it ran and passed; False when it was not due or could not run (logged; it runs at the next
        start). Damage raises `StorageCorrupt`, and from then on every write raises it too: nothing more goes
        into the file a restore would set aside. `aclose()` interrupts a check that is still running."""
        home = self._core.home
        if self._core.closed or not (force or await asyncio.to_thread(backups.check_due, home)):
            return False
        check = self._check = DatabaseCheck(home)
        started = time.perf_counter()
        try:
            problems = await asyncio.to_thread(check.run)
        except StorageError as exc:
            log.warning("could not check the database: %s", exc)
            return False
        finally:
            if self._check is check:
                self._check = None
        if problems is None:
            return False
        if problems:
            log.error("the database failed its check: %s", "; ".join(problems))
            faults.refuse_commits(self._core.store.engine, lambda: faults.failed_check(home))
            raise faults.failed_check(home)
        log.info("the database passed its check in %.2f s", time.perf_counter() - started)
        await asyncio.to_thread(backups.remember_check, home)
        return True

    def stop_check(self) -> None:
        """Interrupt a database check that still runs (`Runtime.aclose`)."""
        if self._check is not None:
            self._check.stop()

    @staticmethod
    async def backup(home: str | os.PathLike | None = None, dest: str | os.PathLike | None = None) -> BackupInfo:
        """Copy the database, consistent even while Hearth runs, to `dest` (a file or a folder; default the
        folder's `backups/`). `StorageCorrupt` when the database is damaged (no backup is made then)."""
        folder = resolve_home(home)
        return await asyncio.to_thread(backups.backup, folder, Path(dest).expanduser() if dest else None)

    @staticmethod
    async def check(home: str | os.PathLike | None = None) -> CheckReport:
        """SQLite's integrity check and a summary (tasks, messages, size, last backup)."""
        return await asyncio.to_thread(backups.check, resolve_home(home))

    @staticmethod
    async def list(home: str | os.PathLike | None = None) -> builtins.list[BackupInfo]:
        """The backups in the folder's `backups/`, newest first."""
        return await asyncio.to_thread(backups.list_backups, resolve_home(home))

    @staticmethod
    async def restore(home: str | os.PathLike | None, path: str | os.PathLike) -> Restored:
        """Replace the database with the backup at `path`; the current one is kept aside as
        `hearth.sqlite3.broken-<time>`. Then call `Runtime.open` again."""
        folder = resolve_home(home)
        source = Path(path).expanduser()

        def restore() -> Restored:
            if not source.is_file():
                raise BackupNotFound(f"There is no backup at {source}.")
            return Restored(backups.describe(source), backups.restore(folder, source))

        return await _owning(folder, restore)

    @staticmethod
    async def restore_latest(home: str | os.PathLike | None = None) -> Restored:
        """Restore the newest backup that is not damaged (`BackupNotFound` when there is none)."""
        folder = resolve_home(home)
        return await _owning(folder, lambda: backups.restore_latest(folder))


async def _owning(home: Path, work: Callable[[], T]) -> T:
    """Run `work` in a thread while holding the data folder (no Hearth may use it meanwhile)."""
    with storage_faults(home):
        lock = DataFolderLock.acquire(home)
    try:
        return await asyncio.to_thread(work)
    finally:
        lock.release()
