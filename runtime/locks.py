"""Per-task asyncio locks: the real guard that no two runs of one task ever overlap."""

from __future__ import annotations

import asyncio
from collections import defaultdict


class TaskLocks:
    def __init__(self) -> None:
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def __getitem__(self, task_id: str) -> asyncio.Lock:
        return self._locks[task_id]

    def locked(self, task_id: str) -> bool:
        lock = self._locks.get(task_id)
        return lock is not None and lock.locked()
