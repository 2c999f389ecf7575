"""TurnHost: one surface's turns — a task's, or a chat's — from input to subscription.

A surface (the tasks of `Runtime`, or `Runtime.chats`) brings its conversation tables (a `store.conversations.
Conversations`) and its agent; everything else is shared: the per-owner lock, the Stop registry, the stream
buffers, the job queue. So a chat gets the guarantees a task has, from the same code: an input is durable before
`send` returns, the same client message id is written once however often it is sent, a new input never overtakes
queued ones, Stop ends the turn `aborted`, a crash leaves it `interrupted` (startup recovery), and a subscriber
replays the turn and follows it live.

`send()` does only what must happen before the work could disappear (runtime/ARCHITECTURE.md, "A turn"); the
turn itself runs in `turn.run_turn` on this host's `TurnServices`.

Where the turn runs is this class's to say, in a few methods a server's host overrides (runtime/server/host.py,
whose turns run in workers): `_claim` (who holds the owner: here the slot in the Stop registry), `_unclaim`,
`_held_duplicate` (a send repeated while its turn holds the owner), `_launch` (start the turn), `_queued` (an
input was queued behind a running turn), and `run_queued`, `stop`, `wait_idle`, `subscribe`, `stream_state`,
`clear_stop`. The send itself — the order of its checks, the write lock, the duplicates, the queue — is shared.

A turn that ended `waiting` leaves the owner waiting for the person's answer. Stop ends that wait (as any input
but the answer does): the turn's end becomes `aborted`, its calls that waited `stopped`, and its observers are
told so on the turn's stream (`_told_ended_wait`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import defaultdict
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, TaskBusy
from ..events import Aborted, EndReason, Event, TurnEnded, TurnStarted
from ..infos import TurnHandle
from ..parts import text_of, tool_event
from ..store.conversations import DuplicateMessage
from .abort import TurnSlot
from .ports import TurnServices
from .stream_buffer import BufferState
from .titles import provisional_title
from .turn import run_turn

if TYPE_CHECKING:
    from ..store.conversations import EndedWait, Started
    from .abort import AbortRegistry
    from .jobs import JobQueue
    from .locks import TaskLocks
    from .ports import AgentPort, HostStorage
    from .stream_buffer import BufferRegistry

# (owner row, the input's parts) -> the parts to store: a task adds its attachments' text here.
AddParts = Callable[[dict, list[dict]], Awaitable[list[dict]]]


class Holding(Protocol):
    """Whoever holds an owner for a turn (`TurnHost._claim`): that turn and the client message id of its input."""

    @property
    def turn_id(self) -> str: ...

    @property
    def client_msg_id(self) -> str | None: ...


class TurnHost:
    def __init__(self, store: HostStorage, agent: AgentPort, *, locks: TaskLocks, aborts: AbortRegistry,
                 buffers: BufferRegistry, jobs: JobQueue, owner_row: Callable[[str], Awaitable[dict]],
                 writable: Callable[[], None], closed: Callable[[], bool], runs: set[asyncio.Task],
                 noun: str = "Task", turn_over: Callable[[str], None] | None = None):
        self.store = store
        self.noun = noun  # what errors call an owner
        self.aborts = aborts
        self.buffers = buffers
        # Post-turn jobs run in process, on this surface's parts.
        self.services = TurnServices(storage=store, locks=locks, aborts=aborts, streams=buffers,
                                     jobs=jobs.bind(lambda: self.services), agent=agent,
                                     on_turn_done=self._turn_done)
        self._owner_row = owner_row  # raises the surface's not-found error
        self._writable = writable
        self._closed = closed
        self._runs = runs  # shared with the runtime, which waits for them at shutdown
        self._turn_over = turn_over  # told each owner whose turn ended (committed, slot released): a team plan
        self._has_queue: set[str] = set()  # owners whose queued inputs this process runs one after another
        self._sending: dict[tuple[str, str], asyncio.Future] = {}  # inputs being written, by client id
        # One input of an owner written at a time, in the order sends came in: a later one never overtakes.
        self._writes: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    # -- input --

    async def send(self, owner_id: str, parts: list[dict], client_msg_id: str | None, queue: bool,
                   add_parts: AddParts | None = None) -> TurnHandle:
        """Persist the input and start its turn (or queue it behind the running one with `queue`)."""
        self._writable()
        if client_msg_id is None:
            return await self._send_once(owner_id, parts, None, queue, add_parts)
        # The same input retried while its first send is still being written waits for that one: a storm of
        # 1,000 retries costs one write, not 1,000 reads.
        key = (owner_id, client_msg_id)
        first = self._sending.get(key)
        if first is not None:
            handle = await asyncio.shield(first)
            return dataclasses.replace(handle, duplicate=True)
        first = self._sending[key] = asyncio.get_running_loop().create_future()
        try:
            handle = await self._send_once(owner_id, parts, client_msg_id, queue, add_parts)
        except asyncio.CancelledError:
            first.cancel()
            raise
        except BaseException as exc:
            first.set_exception(exc)
            first.exception()  # retrieved here; waiters re-raise it
            raise
        finally:
            del self._sending[key]
        first.set_result(handle)
        return handle

    async def _send_once(self, owner_id: str, parts: list[dict], client_msg_id: str | None, queue: bool,
                         add_parts: AddParts | None) -> TurnHandle:
        slot = TurnSlot(owner_id, uuid.uuid4().hex, client_msg_id)
        held = await self._claim(slot)
        if held is not None:
            if client_msg_id is not None and held.client_msg_id == client_msg_id:
                return await self._held_duplicate(owner_id, held)
            if not queue:
                raise TaskBusy(owner_id, self.noun)
            async with self._writes[owner_id]:
                return await self._enqueue(owner_id, parts, client_msg_id, add_parts)
        # The write lock is taken before any await here, and is fair: inputs are written in send order.
        try:
            async with self._writes[owner_id]:
                owner = await self._owner_row(owner_id)
                if client_msg_id is not None and (
                        seen := await self.store.find_client_message(owner_id, client_msg_id)):
                    await self._unclaim(slot)
                    return self.duplicate(seen)
                if add_parts is not None:
                    parts = await add_parts(owner, parts)
                try:
                    msg_id, started = await self.store.add_input(
                        owner_id, parts, client_msg_id=client_msg_id, turn_id=slot.turn_id,
                        title=None if owner["title"] else provisional_title(parts))
                except DuplicateMessage as dup:
                    await self._unclaim(slot)
                    return self.duplicate(dup.row)
                assert started is not None, "with a turn id a turn starts: this input's or an older queued one's"
        except BaseException:
            await self._unclaim(slot)
            raise
        await self._launch(slot, owner, started)
        if started.input_id != msg_id:  # older queued inputs go first; this one waits behind them
            self._has_queue.add(owner_id)
            return TurnHandle(owner_id, None, msg_id, queued=True)
        return TurnHandle(owner_id, slot.turn_id, msg_id)

    async def _enqueue(self, owner_id: str, parts: list[dict], client_msg_id: str | None,
                       add_parts: AddParts | None) -> TurnHandle:
        owner = await self._owner_row(owner_id)
        if client_msg_id is not None and (seen := await self.store.find_client_message(owner_id, client_msg_id)):
            return self.duplicate(seen)
        if add_parts is not None:
            parts = await add_parts(owner, parts)
        try:
            msg_id, _ = await self.store.add_input(owner_id, parts, client_msg_id=client_msg_id, turn_id=None)
        except DuplicateMessage as dup:
            return self.duplicate(dup.row)
        await self._queued(owner_id)
        return TurnHandle(owner_id, None, msg_id, queued=True)

    # -- who holds an owner, and where its turn runs: this process --

    async def _claim(self, slot: TurnSlot) -> Holding | None:
        """Hold the owner for `slot`'s turn: None when this send got it, else who holds it. Here the slot is
        registered at once (no await): a concurrent send sees it and gets TaskBusy, or queues behind this input."""
        held = self.aborts.get(slot.task_id)
        if held is not None:
            return held
        self.aborts.register(slot)
        return None

    async def _unclaim(self, slot: TurnSlot) -> None:
        self.aborts.release(slot)

    async def _held_duplicate(self, owner_id: str, held: Holding) -> TurnHandle:
        """The input of the turn that holds the owner was sent again."""
        assert isinstance(held, TurnSlot)
        return TurnHandle(owner_id, held.turn_id, held.input_message_id, duplicate=True)

    async def _queued(self, owner_id: str) -> None:
        """An input was queued behind the running turn: it starts when that turn is over."""
        self._has_queue.add(owner_id)
        if owner_id not in self.aborts:  # the running turn ended while we were writing
            self._after_turn(owner_id)

    async def last_input(self, owner_id: str) -> int:
        """The newest input the person typed (not a Continue, a retry or an answer)."""
        for msg in reversed(await self.store.messages(owner_id, limit=200)):
            if msg["role"] == "user" and msg["status"] == "complete" and text_of(msg["parts"]) and not any(
                    p.get("type") in ("retry", "continue") for p in msg["parts"]):
                return msg["id"]
        raise ConfigError("There is no message of yours to answer again yet.")

    # -- the queue --

    async def run_queued(self, owner_id: str) -> TurnHandle | None:
        self._writable()
        await self._owner_row(owner_id)
        self._has_queue.add(owner_id)
        if owner_id in self.aborts:
            return None
        slot, starting = self._start_next(owner_id)
        await asyncio.shield(starting)
        if not slot.input_message_id:
            return None
        return TurnHandle(owner_id, slot.turn_id, slot.input_message_id)

    async def discard_queued(self, owner_id: str, message_id: int) -> bool:
        self._writable()
        await self._owner_row(owner_id)
        return await self.store.discard_queued(owner_id, message_id)

    def _turn_done(self, owner_id: str) -> None:
        if self._turn_over is not None:
            self._turn_over(owner_id)
        self._after_turn(owner_id)

    def _after_turn(self, owner_id: str) -> None:
        """A turn is over: start the owner's next queued input, if this process has any waiting."""
        if owner_id in self._has_queue and owner_id not in self.aborts and not self._closed():
            self._start_next(owner_id)

    def _start_next(self, owner_id: str) -> tuple[TurnSlot, asyncio.Task]:
        # Registered now, so wait_idle keeps waiting and a concurrent send queues behind it.
        slot = TurnSlot(owner_id, uuid.uuid4().hex, None)
        self.aborts.register(slot)
        return slot, self._spawn(self._start_queued(slot))

    async def _start_queued(self, slot: TurnSlot) -> None:
        try:
            owner = await self._owner_row(slot.task_id)
            started = await self.store.start_queued_turn(slot.task_id, slot.turn_id)
        except BaseException:
            self.aborts.release(slot)
            raise
        if started is None:
            self._has_queue.discard(slot.task_id)
            self.aborts.release(slot)
            return
        await self._launch(slot, owner, started)

    # -- the turn --

    async def _launch(self, slot: TurnSlot, owner: dict, started: Started) -> None:
        """Start the turn whose input is stored (`started`): here, in this process."""
        slot.input_message_id, slot.output_message_id = started.input_id, started.output_id
        if started.ended_wait is not None:  # the input ended a wait for an answer: said before the turn starts
            self._told_ended_wait(slot.task_id, started.ended_wait)
        buffer = self.buffers.reset(slot.task_id, slot.turn_id)
        buffer.publish(TurnStarted(task_id=slot.task_id, turn_id=slot.turn_id,
                                   input_message_id=slot.input_message_id))
        slot.attach(buffer.publish)
        self._spawn(run_turn(self.services, slot, owner, started.parts))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        run = asyncio.ensure_future(coro)
        self._runs.add(run)
        run.add_done_callback(self._runs.discard)
        return run

    async def stop(self, owner_id: str) -> None:
        """Stop the running turn, or end a wait for the person's answer (both end `aborted`): idempotent, a no-op
        when nothing runs or waits."""
        slot = self.aborts.get(owner_id)
        if slot is not None:
            slot.abort(EndReason.aborted)
            return
        if not await self.store.is_waiting(owner_id) or owner_id in self.aborts:
            return  # (an input that came meanwhile ends the wait itself)
        self._writable()
        # Registered while the wait ends, as a turn's slot is: an input sent meanwhile queues behind it.
        slot = TurnSlot(owner_id, uuid.uuid4().hex, None)
        self.aborts.register(slot)
        try:
            ended = await self.store.end_wait(owner_id)
        finally:
            self.aborts.release(slot)
        if ended is not None:
            self._told_ended_wait(owner_id, ended)
            self._turn_done(owner_id)  # a team's plan takes in the stopped assignment
        else:
            self._after_turn(owner_id)

    def _told_ended_wait(self, owner_id: str, ended: EndedWait) -> None:
        """Tell the turn that waited that its end is now `aborted`: observers of the turn (a follow-subscriber goes
        on after what it saw) and of every task (`rt.events()`) learn that nothing waits any more."""
        buffer = self.buffers.reopen(owner_id, ended.turn_id)
        for event in wait_ended_events(owner_id, ended):
            buffer.publish(event)

    async def wait_idle(self, owner_id: str) -> None:
        """Wait until the owner's current (and queued) turns are finalized and cleaned up."""
        while (slot := self.aborts.get(owner_id) or self.aborts.ending(owner_id)) is not None:
            await asyncio.shield(slot.done)

    async def subscribe(self, owner_id: str, after_seq: int = 0, turn_id: str | None = None,
                        follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        """Replay the current/last turn's events after `after_seq`, then live ones, and end after its terminal
        event; ends at once when nothing is in memory (read the messages then). With `follow=True` it goes on
        with every later turn (each from seq 1) until the runtime closes. `deltas=False` leaves text and
        reasoning deltas out (cheap for a status view)."""
        buffer = self.buffers.get(owner_id)
        if buffer is None:
            await self._owner_row(owner_id)
        while True:
            if buffer is not None:
                if turn_id is not None and turn_id != buffer.turn_id:
                    after_seq = 0
                async for event in buffer.subscribe(after_seq, deltas):
                    after_seq = event.seq
                    yield event
            if not follow:
                return
            # The next buffer is a later turn's (from its start), or this one's again with its end told anew (a
            # wait that ended without an answer: from after what was seen).
            if buffer is None:
                after_seq, turn_id = 0, None
            else:
                turn_id = buffer.turn_id
            buffer = await self.buffers.next_buffer(owner_id, buffer)
            if buffer is None:
                return

    async def stream_state(self, owner_id: str) -> BufferState:
        """Whether the owner's current or last turn is in memory: active, completed, or missing (read the messages)."""
        return self.buffers.state(owner_id)

    async def clear_stop(self, owner_id: str) -> None:
        """A new input is coming: a Stop requested before it is stale. Here a Stop is the running turn's slot, which
        a new input never has, so there is nothing to clear."""

    def duplicate(self, row: dict[str, Any]) -> TurnHandle:
        return TurnHandle(row[self.store.owner_key], row["turn_id"], row["id"], duplicate=True,
                          queued=row["status"] == "queued")


def wait_ended_events(owner_id: str, ended: EndedWait) -> list[Any]:
    """What tells a turn's observers that its wait for an answer ended `aborted`: `aborted`, each stopped call, a
    new `turn_ended`."""
    return [Aborted(task_id=owner_id, turn_id=ended.turn_id),
            *(tool_event(owner_id, ended.turn_id, part) for part in ended.stopped),
            TurnEnded(task_id=owner_id, turn_id=ended.turn_id, reason=EndReason.aborted, usage=ended.usage)]
