"""`hearth worker`: where a distributed server's turns run (runtime/ARCHITECTURE.md, "Server host").

An arq worker on Hearth's queue takes two jobs:

- `task.run` (task id, turn id), enqueued by an API instance once the input is stored and the task's stream reset
  (server/host.py). `TurnWorker.run`: take the task's lease from its queued hold (another worker has it: `TaskBusy`,
  and the job ends touching nothing); read the turn as its send stored it; watch the abort bus for the task (the
  watch reads the Stop flag after subscribing, so a Stop sent before the run started is honoured); go on with the
  stream the API started; then the shared `run_turn` on this worker's ports: storage the server's database, the
  lease as the task lock (renewed by its heartbeat; a lease lost ends the turn `interrupted`), this process's Stop
  registry, the Redis stream, the queue for post-turn jobs, the task kit behind the quota check. Finalize is the
  one finalize path; the cleanup writes the rest of the stream before it lets go of the lease, so a client that saw
  `turn_ended` finds the task free. Then the owner's feed hears the end and the task's next queued input starts.
  Each job runs once (`max_tries=1`): a worker that dies leaves the turn to the lease reaper (server/reaper.py),
  never to a second run. A worker that is stopped (SIGTERM) ends its turns `interrupted`, as the desktop's shutdown.
- `post_turn` (kind, owner id, payload): the jobs finalize enqueued (title, memory extraction, the user's token
  usage, counted once per turn by its job id `quota:<turn>`), run by engine/jobs.run_post_turn on the services this
  worker builds, and written to the job log.

Every worker also runs the lease reaper.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from arq import func
from arq.connections import ArqRedis

from ..api import Runtime
from ..engine.abort import TurnSlot
from ..engine.jobs import run_post_turn, run_recorded
from ..engine.ports import TurnServices
from ..engine.stream_buffer import BufferState
from ..engine.turn import run_turn
from ..errors import HearthError, TaskBusy
from ..events import EndReason, TurnEnded, TurnStarted
from ..store.repo import Store
from .host import QUEUE_NAME, RUN_JOB, ServerParts
from .quota import QuotaGate
from .redis.abort import AbortListener
from .redis.common import TRANSIENT
from .redis.lease import Lease
from .redis.stream import RedisStreamWriter

log = logging.getLogger(__name__)

POST_TURN_JOB = "post_turn"
TURN_TIMEOUT = 6 * 60 * 60  # arq cancels a job after this: a turn that long ends `interrupted`
POST_TURN_TIMEOUT = 10 * 60


class TurnWriter(RedisStreamWriter):
    """The turn's Redis stream; it keeps the turn's terminal event for the owner's feed."""

    end: TurnEnded | None = None

    def publish(self, event: Any) -> None:
        first_end = type(event) is TurnEnded and not self.ended
        super().publish(event)
        if first_end:
            self.end = event


class LeaseLock:
    """The task lock port of one turn: the lease its worker took. Let go of after the turn's stream is written."""

    def __init__(self, lease: Lease, writer: RedisStreamWriter):
        self._lease = lease
        self._writer = writer

    @contextlib.asynccontextmanager
    async def hold(self, task_id: str) -> AsyncIterator[object]:
        try:
            yield self._lease
        finally:
            await self.let_go()

    async def let_go(self) -> None:
        await self._writer.aclose()
        await self._lease.release()


class WorkerStreams:
    """The stream transport of a worker: each running turn's stream, and the owners' feeds (a new title)."""

    def __init__(self, parts: ServerParts, store: Store):
        self.writers: dict[str, RedisStreamWriter] = {}
        self._parts = parts
        self._store = store
        self._telling: set[asyncio.Task[None]] = set()

    def get(self, task_id: str) -> RedisStreamWriter | None:
        return self.writers.get(task_id)

    def announce(self, event: Any) -> None:
        telling = asyncio.ensure_future(self._tell(event))
        self._telling.add(telling)
        telling.add_done_callback(self._telling.discard)

    async def _tell(self, event: Any) -> None:
        task = await self._store.get_task(event.task_id)
        await self._parts.tell(task["owner_id"] if task else None, event)

    async def flush(self) -> None:
        await asyncio.gather(*self._telling, return_exceptions=True)


class QueuedJobs:
    """The job port of a worker: post-turn jobs go on the queue for any worker (`key`: the job's id, so a job is
    enqueued once). Enqueuing never holds the turn up; `flush()` waits until what was handed over is queued."""

    def __init__(self, client: ArqRedis):
        self._client = client
        self._sending: set[asyncio.Task[None]] = set()

    def enqueue(self, kind: str, owner_id: str | None, payload: dict[str, Any], *, key: str | None = None,
                disposable: bool = False) -> None:
        sending = asyncio.ensure_future(self._send(kind, owner_id, payload, key))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _send(self, kind: str, owner_id: str | None, payload: dict[str, Any], key: str | None) -> None:
        try:
            await self._client.enqueue_job(POST_TURN_JOB, kind, owner_id, payload, _job_id=key,
                                           _queue_name=QUEUE_NAME)
        except TRANSIENT as error:
            log.warning("Task %s: the %s job could not be queued (Redis cannot be reached): %s", owner_id, kind,
                        error)

    async def flush(self) -> None:
        await asyncio.gather(*self._sending, return_exceptions=True)


def _nothing(task_id: str) -> None:
    """A worker's turn starts no queued input from inside the run: `TurnWorker.run` does, after the lease is free."""


class TurnWorker:
    """The jobs of one worker process (`run`, `post_turn`) on its runtime (the server's database and data folder,
    the tasks' host on Redis) and its abort listener."""

    def __init__(self, rt: Runtime, parts: ServerParts, listener: AbortListener):
        self._rt = rt
        self._parts = parts
        self._listener = listener
        self._store = rt.core.store
        self.streams = WorkerStreams(parts, self._store)
        self.jobs = QueuedJobs(parts.client)
        self._agent = QuotaGate(rt.kit, self._store)
        self.services = TurnServices(storage=self._store, locks=rt.core.locks, aborts=rt.core.aborts,
                                     streams=self.streams, jobs=self.jobs, agent=rt.kit, on_turn_done=_nothing)

    def functions(self) -> list[Any]:
        """The arq functions: a turn runs once at most, and a long one is not cut short."""
        return [func(self.run, name=RUN_JOB, max_tries=1, timeout=TURN_TIMEOUT),
                func(self.post_turn, name=POST_TURN_JOB, max_tries=3, timeout=POST_TURN_TIMEOUT)]

    async def run(self, ctx: dict[str, Any], task_id: str, turn_id: str) -> str:
        """The `task.run` job; returns the turn's ending reason, or why it was not run."""
        aborts = self._rt.core.aborts
        try:
            lease = await self._parts.leases.acquire(task_id, turn_id, on_lost=lambda: self._lost(task_id))
        except TaskBusy as busy:  # another worker runs the task, or the turn's hold is gone: nothing to do here
            log.warning("Task %s: turn %s is not run here: %s", task_id, turn_id, busy)
            return "not run"
        writer = TurnWriter(self._parts.client, task_id, turn_id)
        lock = LeaseLock(lease, writer)
        try:
            task = await self._store.get_task(task_id)
            started = await self._store.running_turn(task_id, turn_id)
            if task is None or started is None:  # deleted, or ended by the reaper while it waited for a worker
                await lock.let_go()
                return "over"
            slot = TurnSlot(task_id, turn_id, lease.holder.client_msg_id or None, started.input_id,
                            started.output_id)
            await self._listener.watch(task_id, lambda: self._stop(slot))
            if await writer.attach() != BufferState.active:  # Redis lost the stream the API started
                await writer.reset(TurnStarted(task_id=task_id, turn_id=turn_id, input_message_id=started.input_id))
            slot.attach(writer.publish)
            aborts.register(slot)
        except BaseException:
            self._listener.unwatch(task_id)
            await lock.let_go()
            raise
        log.info("Task %s: turn %s runs here", task_id, turn_id)
        services = TurnServices(storage=self._store, locks=lock, aborts=aborts,
                                streams=self.streams, jobs=self.jobs, agent=self._agent, on_turn_done=_nothing)
        self.streams.writers[task_id] = writer
        run = asyncio.ensure_future(run_turn(services, slot, task, started.parts))
        try:
            await asyncio.shield(run)
        except asyncio.CancelledError:  # the worker stops, or the job ran too long: the turn ends interrupted
            slot.abort(EndReason.interrupted)
            await run
            raise
        finally:
            self._listener.unwatch(task_id)
            self.streams.writers.pop(task_id, None)
            await self.jobs.flush()
            if writer.end is not None:
                await self._parts.tell(task["owner_id"], writer.end)
        log.info("Task %s: turn %s ended %s", task_id, turn_id, writer.end.reason if writer.end else "unannounced")
        await self._next(task_id)
        return writer.end.reason.value if writer.end else "ended"

    @staticmethod
    def _stop(slot: TurnSlot) -> None:
        """A Stop reached this worker (the abort bus): the turn ends `aborted` at its next await."""
        slot.abort(EndReason.aborted)

    def _lost(self, task_id: str) -> None:
        """The lease could not be kept: the turn must not go on beside another run of the task."""
        slot = self._rt.core.aborts.get(task_id)
        if slot is not None:
            slot.abort(EndReason.interrupted)

    async def _next(self, task_id: str) -> None:
        """Start the input queued behind this turn, now that the task is free (server/host.dispatch_queued)."""
        try:
            if await self._store.has_queued(task_id):
                await self._rt.tasks.run_queued(task_id)
        except HearthError as error:
            log.warning("Task %s: its next queued input could not be started: %s", task_id, error)

    async def post_turn(self, ctx: dict[str, Any], kind: str, owner_id: str | None, payload: dict[str, Any]) -> None:
        """The `post_turn` job: what finalize enqueued, written to the job log like the desktop's jobs."""
        await run_recorded(kind, owner_id, run_post_turn(self.services, kind, payload), self._store.record_job)
        await self.streams.flush()
