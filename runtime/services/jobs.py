"""The background jobs (`rt.jobs`): the log of what ran (memory extraction, indexing, titles, backups …) and
whether any is still going."""

from __future__ import annotations

from ..engine.jobs import job_label
from ..store.memory_repo import MemoryRepo
from .core import Core


class Jobs:
    def __init__(self, core: Core, records: MemoryRepo):
        self._core = core
        self._records = records  # where a job's end is written down

    async def log(self, kind: str | None = None, limit: int = 50, *, failed: bool = False) -> list[dict]:
        """The newest background jobs (memory.extraction, resource.index, ...): kind and its `label` for people,
        task_id and task_title, status, error, created_at. `failed`: only the jobs that failed."""
        rows = await self._records.jobs(kind, limit, failed=failed)
        return [{**row, "label": job_label(row["kind"])} for row in rows]

    @property
    def pending(self) -> int:
        """How many jobs are still running."""
        return self._core.jobs.pending

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for the running jobs, at most `timeout` seconds (then they are cancelled)."""
        await self._core.jobs.drain(timeout)
