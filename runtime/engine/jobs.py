"""Background jobs: in process (memory extraction, document indexing, backups, the MCP SDK preload), and the
post-turn jobs finalize enqueues through the turn's `JobPort`.

A post-turn job is a kind and a JSON-able payload, run by a handler that takes what it needs from a
`TurnServices` (`run_post_turn`): the title (engine/titles.py), the user's token usage (`quota`), and the agent's
own jobs (`AgentPort.run_job`: memory extraction). On the desktop the `JobQueue` runs them in process
(`JobQueue.bind`: the surface's services); a server worker takes them off its queue and runs the same handlers
on the services it builds itself (runtime/server/worker.py).

The in-process queue is fire-and-forget for the caller, but keeps a reference to every task (asyncio only keeps
weak ones), logs failures without raising them, records each job through `on_record`, and `drain()` waits for
what is left at shutdown, cancelling what overruns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import HearthError
from ..redact import redact
from .titles import title_job

if TYPE_CHECKING:
    from .ports import TurnServices

log = logging.getLogger(__name__)

# What each kind of job is called where a person reads the job log (`hearth jobs`, Settings ▸ Jobs).
JOB_LABELS = {"memory.extraction": "Saving memories", "resource.index": "Indexing documents",
              "backup": "Backup", "mcp_preload": "Preparing MCP", "title": "Writing a title",
              "quota": "Counting tokens"}

Record = Callable[[str, str | None, str, str | None], Awaitable[None]]


def job_label(kind: str) -> str:
    return JOB_LABELS.get(kind, kind)


@runtime_checkable
class UsageStorage(Protocol):
    """A store that counts a server user's tokens (store.users.UsersRepo)."""

    async def add_usage(self, user_id: str, tokens: int) -> None: ...


async def run_post_turn(services: TurnServices, kind: str, payload: dict[str, Any]) -> Any:
    """Run a post-turn job of `kind` on `payload` with the parts of `services`."""
    if kind == "title":
        return await title_job(services, payload)
    if kind == "quota":
        storage = services.storage
        if not isinstance(storage, UsageStorage):
            raise TypeError(f"{type(storage).__name__} keeps no token usage")
        return await storage.add_usage(payload["user_id"], payload["tokens"])
    return await services.agent.run_job(kind, payload)


async def run_recorded(kind: str, task_id: str | None, job: Awaitable[Any], on_record: Record | None) -> None:
    """Await the job; its failure is logged and recorded, never raised; its end is recorded through `on_record`."""
    status, error = "done", None
    try:
        await job
    except asyncio.CancelledError:
        status = "cancelled"
        raise
    except Exception as exc:  # a job's failure is logged, never fatal
        # The record is shown to the person (Settings ▸ Memory): a HearthError's message is written for them.
        said = str(exc) if isinstance(exc, HearthError) else f"{type(exc).__name__}: {exc}"
        status, error = "failed", redact(said)
        log.warning("background job %s for task %s failed: %s", kind, task_id, error)
    finally:
        if on_record is not None:
            try:
                await on_record(kind, task_id, status, error)
            except Exception:
                log.exception("could not record background job %s", kind)


class JobQueue:
    def __init__(self, on_record: Record | None = None):
        self._tasks: set[asyncio.Task] = set()
        self._disposable: set[asyncio.Task] = set()
        self._on_record = on_record

    def submit(self, kind: str, task_id: str | None, coro: Awaitable, *, disposable: bool = False) -> asyncio.Task:
        """`disposable`: a job worth nothing at shutdown (a title): `drain` cancels it rather than wait."""
        job = asyncio.ensure_future(run_recorded(kind, task_id, coro, self._on_record))
        self._tasks.add(job)
        job.add_done_callback(self._tasks.discard)
        if disposable:
            self._disposable.add(job)
            job.add_done_callback(self._disposable.discard)
        return job

    def bind(self, services: Callable[[], TurnServices]) -> LocalJobs:
        """The turn's job port on this queue: post-turn jobs run here, on `services()`."""
        return LocalJobs(self, services)

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


class LocalJobs:
    """The desktop's `JobPort`: a post-turn job runs at once in this process. `key` needs no checking here: a turn
    is finalized once, in this process."""

    def __init__(self, queue: JobQueue, services: Callable[[], TurnServices]):
        self._queue = queue
        self._services = services

    def enqueue(self, kind: str, owner_id: str | None, payload: dict[str, Any], *, key: str | None = None,
                disposable: bool = False) -> None:
        self._queue.submit(kind, owner_id, run_post_turn(self._services(), kind, payload), disposable=disposable)
