"""Backups, checks and restores of the database (runtime/ARCHITECTURE.md, "Storage"). Blocking: run in a thread.

- A backup is made with SQLite's online backup API from a connection of its own, in one step, so it is a
  consistent snapshot even while the owner of the data folder writes (reading beside the owner is allowed).
  It goes to a temporary name, is checked (`quick_check`: a damaged database gives no backup, so a damaged
  copy never replaces a good one), switched out of WAL mode so it is one self-contained file, then renamed.
- `backups/` in the data folder holds `hearth-<time>.sqlite3` (asked for) and `auto-<time>.sqlite3` (made at
  most once a day after an open; only the newest KEEP_AUTO of those are kept, asked-for ones are never deleted).
- A restore needs the data folder to itself (the caller holds its lock). It checks the backup, moves the current
  database and its WAL aside as `hearth.sqlite3.broken-<time>` (nothing is deleted), and copies the backup in.
  Workspaces and every other file of the folder stay as they are.
- `DatabaseCheck`: the app's check of the database it opened (`quick_check`, at most once a day: CHECK_EVERY,
  remembered in CHECK_STAMP), on a connection of its own reading one snapshot, so writers never wait for it.
  `quick_check` rather than `integrity_check`: it walks every page the same way and differs only in not matching
  each index entry to its row, which costs 5x more (0.8 s against 0.16 s on a 193 MB database with its pages in
  memory); `hearth check` runs the full one on demand.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import HearthError, StorageCorrupt, StorageError
from . import faults

log = logging.getLogger(__name__)

DB_NAME = "hearth.sqlite3"
BACKUP_DIR = "backups"
KEEP_AUTO = 7
AUTO_EVERY = 24 * 3600.0  # seconds between automatic backups
# The automatic backup leaves at least this much free beside twice the database, so it never fills the disk
# the next input has to be saved on.
AUTO_SPARE_BYTES = 16 << 20
CHECK_EVERY = 24 * 3600.0  # seconds between the app's checks of the database
CHECK_STAMP = "hearth.checked"  # in the data folder: when the database last passed that check (UNIX seconds)
_STAMP = "%Y-%m-%d_%H-%M-%S"


class BackupNotFound(HearthError):
    """There is no usable backup to restore."""


@dataclass(frozen=True)
class BackupInfo:
    path: str
    created_at: float  # UNIX seconds
    size_bytes: int
    automatic: bool


@dataclass(frozen=True)
class Restored:
    backup: BackupInfo
    previous: str | None  # where the database it replaced was put aside


@dataclass
class CheckReport:
    """`hearth check`: whether SQLite's integrity check passes, and what the folder holds."""

    ok: bool
    problems: list[str] = field(default_factory=list)
    database: str = ""
    size_bytes: int = 0  # the database and its WAL
    tasks: int | None = None
    messages: int | None = None
    last_backup: BackupInfo | None = None
    backups: int = 0


def backups_dir(home: Path) -> Path:
    return home / BACKUP_DIR


def _stamp(at: float | None = None) -> str:
    return time.strftime(_STAMP, time.localtime(at))


def _info(path: Path) -> BackupInfo | None:
    kind, _, stamp = path.stem.partition("-")
    if kind not in ("hearth", "auto") or path.suffix != ".sqlite3":
        return None
    try:
        created = time.mktime(time.strptime(stamp[:19], _STAMP))
        size = path.stat().st_size
    except (ValueError, OSError):
        return None
    return BackupInfo(str(path), created, size, kind == "auto")


def describe(path: Path) -> BackupInfo:
    """A backup file, also one made elsewhere (named otherwise)."""
    info = _info(path)
    if info is not None:
        return info
    stat = path.stat()
    return BackupInfo(str(path), stat.st_mtime, stat.st_size, False)


def list_backups(home: Path) -> list[BackupInfo]:
    """The backups in the data folder's `backups/`, newest first."""
    try:
        entries = list(backups_dir(home).iterdir())
    except FileNotFoundError:
        return []
    with faults.guard(home):
        found = [info for p in entries if (info := _info(p)) is not None]
    return sorted(found, key=lambda b: (b.created_at, b.path), reverse=True)


def _connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    uri = f"file:{path}?mode=ro" if read_only else f"file:{path}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy(home: Path, source: Path, dest: Path, *, read_only_source: bool) -> None:
    """Copy the database `source` to `dest` (through a temporary name), checked, as one file without WAL."""
    partial = dest.with_name(dest.name + ".partial")
    src = _connect(source, read_only=read_only_source)
    try:
        dst = sqlite3.connect(partial, isolation_level=None)
        try:
            src.backup(dst)  # all pages in one step: one consistent snapshot
            dst.execute("PRAGMA journal_mode=DELETE")
            if dst.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise faults.corrupt(home)
        finally:
            dst.close()
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        src.close()
    _fsync(partial)
    os.replace(partial, dest)


def backup(home: Path, dest: Path | None = None, *, automatic: bool = False) -> BackupInfo:
    """Back the database up to `dest` (a file, or a folder to put it in), by default into `backups/`."""
    with faults.guard(home):
        db = home / DB_NAME
        if not db.exists():
            raise faults.unavailable(home, "there is no database in this folder yet.")
        name = f"{'auto' if automatic else 'hearth'}-{_stamp()}.sqlite3"
        if dest is None:
            dest = backups_dir(home) / name
        elif dest.is_dir():
            dest = dest / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy(home, db, dest, read_only_source=False)
        size = dest.stat().st_size
    return _info(dest) or BackupInfo(str(dest), time.time(), size, automatic)


def auto_backup_due(home: Path, now: float | None = None) -> bool:
    """True when the newest automatic backup is a day old or there is none."""
    now = time.time() if now is None else now
    last = next((b for b in list_backups(home) if b.automatic), None)
    return last is None or now - last.created_at >= AUTO_EVERY


def auto_backup(home: Path) -> BackupInfo | None:
    """The daily automatic backup: made when due, when there is anything to keep and when the disk has room
    to spare; the oldest automatic ones beyond KEEP_AUTO are deleted. Returns the new backup, or None."""
    if not auto_backup_due(home) or not _has_tasks(home):
        return None
    with faults.guard(home):
        size, free = (home / DB_NAME).stat().st_size, shutil.disk_usage(home).free
    if free < 2 * size + AUTO_SPARE_BYTES:
        log.warning("No automatic backup today: the disk holding %s has only %d MB free.", home, free >> 20)
        return None
    made = backup(home, automatic=True)
    for old in [b for b in list_backups(home) if b.automatic][KEEP_AUTO:]:
        with contextlib.suppress(OSError):
            os.unlink(old.path)
    return made


def _has_tasks(home: Path) -> bool:
    with faults.guard(home):
        conn = _connect(home / DB_NAME, read_only=False)
        try:
            return conn.execute("select exists(select 1 from tasks)").fetchone()[0] == 1
        finally:
            conn.close()


def check(home: Path) -> CheckReport:
    """Integrity check and a summary; reads only, so it may run beside the process that owns the folder."""
    db = home / DB_NAME
    backups = list_backups(home)
    report = CheckReport(ok=False, database=str(db), last_backup=backups[0] if backups else None,
                         backups=len(backups))
    report.size_bytes = sum(p.stat().st_size for p in (db, db.with_name(DB_NAME + "-wal")) if p.exists())
    if not db.exists():
        report.problems.append(f"There is no database in {home}.")
        return report
    try:
        with faults.guard(home):
            conn = _connect(db, read_only=False)
            try:
                conn.execute("PRAGMA query_only=1")
                found = [r[0] for r in conn.execute("PRAGMA integrity_check(20)")]
                report.ok = found == ["ok"]
                report.problems.extend(r for r in found if r != "ok")
                if report.ok:
                    report.tasks = conn.execute("select count(*) from tasks").fetchone()[0]
                    report.messages = conn.execute("select count(*) from messages").fetchone()[0]
            finally:
                conn.close()
    except StorageError as exc:
        report.ok = False
        report.problems.append(str(exc))
    return report


class DatabaseCheck:
    """SQLite's quick_check of the open database. `run()` (in a worker thread) returns what it found wrong, [] when
    the database is sound, None when `stop()` (from any thread) interrupted it."""

    def __init__(self, home: Path):
        self.home = home
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._stopped = False

    def run(self) -> list[str] | None:
        try:
            with faults.guard(self.home):
                with self._lock:
                    if self._stopped:
                        return None
                    self._conn = _connect(self.home / DB_NAME, read_only=False)
                try:
                    self._conn.execute("PRAGMA query_only=1")
                    return [r[0] for r in self._conn.execute("PRAGMA quick_check(20)") if r[0] != "ok"]
                finally:
                    with self._lock:
                        self._conn.close()
                        self._conn = None
        except StorageCorrupt as exc:  # a page so broken that the check itself stops
            return [str(exc.__cause__ or exc)]
        except sqlite3.OperationalError:
            if self._stopped:
                return None
            raise

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._conn is not None:
                self._conn.interrupt()


def check_due(home: Path, now: float | None = None) -> bool:
    """True when the database has not passed the app's check for CHECK_EVERY (or the clock went back)."""
    now = time.time() if now is None else now
    try:
        last = float((home / CHECK_STAMP).read_text(encoding="ascii"))
    except (OSError, ValueError):
        return True
    return not 0 <= now - last < CHECK_EVERY


def remember_check(home: Path) -> None:
    try:
        (home / CHECK_STAMP).write_text(f"{time.time():.3f}\n", encoding="ascii")
    except OSError as exc:  # the check runs again at the next start
        log.warning("cannot note the database check in %s: %s", home, exc)


def restore(home: Path, source: Path) -> str | None:
    """Replace the database with the backup `source`; the caller owns the data folder. Returns where the
    previous database was put aside (None when there was none)."""
    with faults.guard(home):
        if not source.is_file():
            raise BackupNotFound(f"There is no backup at {source}.")
        probe = _connect(source, read_only=True)
        try:
            usable = probe.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        except sqlite3.DatabaseError:
            usable = False
        finally:
            probe.close()
        if not usable:
            raise BackupNotFound(f"The backup {source} is damaged too; choose another one.")
        # The copy is complete on disk before the current database moves: a crash in between never leaves
        # the folder without one.
        staged = home / f"{DB_NAME}.restoring"
        _copy(home, source, staged, read_only_source=True)
        aside = None
        if (home / DB_NAME).exists():
            aside = home / f"{DB_NAME}.broken-{_stamp()}"
            for suffix in ("", "-wal", "-shm"):  # the WAL may hold committed data: it moves with its database
                with contextlib.suppress(FileNotFoundError):
                    os.replace(home / (DB_NAME + suffix), home / (aside.name + suffix))
        os.replace(staged, home / DB_NAME)
    return str(aside) if aside else None


def restore_latest(home: Path) -> Restored:
    """Restore the newest backup that is not damaged."""
    for candidate in list_backups(home):
        try:
            return Restored(candidate, restore(home, Path(candidate.path)))
        except BackupNotFound:
            continue
    raise BackupNotFound(f"There is no usable backup in {backups_dir(home)}.")
