"""In-process background jobs (memory extraction, document indexing, backups, the MCP SDK preload).

Fire-and-forget for the caller, but the queue keeps a reference to every task (asyncio only keeps weak
ones), logs failures without raising them, records each job through `on_record`, and `drain()` waits for
what is left at shutdown, cancelling what overruns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ..errors import HearthError
from ..redact import redact

log = logging.getLogger(__name__)

# What each kind of job is called where a person reads the job log (`hearth jobs`, Settings ▸ Jobs).
JOB_LABELS = {"memory.extraction": "Saving memories", "resource.index": "Indexing documents",
              "backup": "Backup", "mcp_preload": "Preparing MCP", "title": "Writing a title"}


def job_label(kind: str) -> str:
    return JOB_LABELS.get(kind, kind)


class JobQueue:
    def __init__(self, on_record: Callable[[str, str | None, str, str | None], Awaitable[None]] | None = None):
        self._tasks: set[asyncio.Task] = set()
        self._disposable: set[asyncio.Task] = set()
        self._on_record = on_record

    def submit(self, kind: str, task_id: str | None, coro: Awaitable, *, disposable: bool = False) -> asyncio.Task:
        """`disposable`: a job worth nothing at shutdown (a title): `drain` cancels it rather than wait."""
        job = asyncio.ensure_future(self._run(kind, task_id, coro))
        self._tasks.add(job)
        job.add_done_callback(self._tasks.discard)
        if disposable:
            self._disposable.add(job)
            job.add_done_callback(self._disposable.discard)
        return job

    async def _run(self, kind: str, task_id: str | None, coro: Awaitable) -> None:
        status, error = "done", None
        try:
            await coro
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except Exception as exc:  # a job's failure is logged, never fatal
            # The record is shown to the person (Settings ▸ Memory): a HearthError's message is written for them.
            said = str(exc) if isinstance(exc, HearthError) else f"{type(exc).__name__}: {exc}"
            status, error = "failed", redact(said)
            log.warning("background job %s for task %s failed: %s", kind, task_id, error)
        finally:
            if self._on_record is not None:
                try:
                    await self._on_record(kind, task_id, status, error)
                except Exception:
                    log.exception("could not record background job %s", kind)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float = 5.0) -> None:
        for job in list(self._disposable):
            job.cancel()
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=timeout)
        for job in late:
            job.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
