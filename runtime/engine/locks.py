"""Locks: per-task asyncio locks inside a process, and the data-folder lock across processes.

`TaskLocks` is the real guard that no two runs of one task overlap in this process. The asyncio lock cannot
see other processes, so `DataFolderLock` makes one process the owner of a data folder: an exclusive,
non-blocking OS lock on `hearth.lock`, held for the runtime's life and released by the OS if the process dies
(so a crash never leaves a stale lock). The file holds the owner's pid, only to name it in the error.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import defaultdict
from pathlib import Path

from ..errors import DataFolderBusy

LOCK_NAME = "hearth.lock"


class TaskLocks:
    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def hold(self, task_id: str) -> asyncio.Lock:
        """The task's lock, to hold with `async with`: a run waits for the one before it."""
        return self._locks[task_id]

    def locked(self, task_id: str) -> bool:
        lock = self._locks.get(task_id)
        return lock is not None and lock.locked()


class DataFolderLock:
    def __init__(self, fd: int, path: Path):
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, home: Path) -> DataFolderLock:
        """Take the folder or raise `DataFolderBusy` naming the process that has it."""
        path = home / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(fd)
        except OSError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataFolderBusy(str(home), pid) from None
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, str(os.getpid()).encode())
        except OSError:  # e.g. a full disk: let go of the folder instead of holding it until exit
            os.close(fd)
            raise
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing drops the lock


def _read_pid(fd: int) -> int | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None


if sys.platform == "win32":  # pragma: no cover - Windows (the test mypy understands, as os.name == "nt")
    import msvcrt

    def _lock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
