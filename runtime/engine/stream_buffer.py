"""StreamBuffer: the in-memory, replayable event stream of a task's current or last turn.

- The producer never awaits and never blocks: `append_delta` and `publish` only append and wake waiters.
- Text and reasoning deltas are not stored as objects: consecutive deltas of one part form a `_Run` that
  keeps the text in a few joined blocks plus an array of cumulative offsets (one int per seq, no object per
  chunk). Readers get one coalesced `TextDelta`/`ReasoningDelta` per run, carrying the run's last seq, so a
  replay costs O(parts), not O(tokens), and resuming after any seq inside a run returns its exact suffix.
- `subscribe(after_seq)` yields everything after `after_seq`, then live events, and ends after the
  terminal `turn_ended`. Each subscriber keeps its own position, so slow, late or many subscribers never
  lose an event and never hold the producer back.
- No silent cap: a buffer holds its whole turn. The registry evicts *completed* buffers after a while or
  when completed buffers together exceed a memory budget; observers then read persisted messages.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import AsyncIterator, Callable
from enum import StrEnum
from typing import final

from ..events import Event, ReasoningDelta, TextDelta, TurnEnded

TEXT_KIND = 0
REASONING_KIND = 1
_FOLD_EVERY = 256


class BufferState(StrEnum):
    active = "active"
    completed = "completed"
    missing = "missing"


@final  # so that `type(entry) is _Run` tells mypy the other entries are events
class _Run:
    """Consecutive deltas of one part."""

    __slots__ = ("block_ends", "blocks", "ends", "first_seq", "kind", "last_seq", "part_id", "pending")

    def __init__(self, kind: int, part_id: int, seq: int):
        self.kind = kind
        self.part_id = part_id
        self.first_seq = seq
        self.last_seq = seq - 1
        self.blocks: list[str] = []
        self.block_ends = array("q")  # char offset at the end of each block
        self.pending: list[str] = []
        self.ends = array("q")  # char offset at the end of each seq of this run

    def add(self, text: str, seq: int) -> None:
        self.last_seq = seq
        self.pending.append(text)
        self.ends.append((self.ends[-1] if self.ends else 0) + len(text))
        if len(self.pending) >= _FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if self.pending:
            self.blocks.append("".join(self.pending))
            self.block_ends.append(self.ends[-1])
            self.pending.clear()

    def text_after(self, after_seq: int) -> str:
        """Text of the seqs after `after_seq` (which is >= first_seq - 1)."""
        self._fold()
        start = 0 if after_seq < self.first_seq else self.ends[after_seq - self.first_seq]
        if start == 0:
            return "".join(self.blocks)
        i = bisect_right(self.block_ends, start)
        block_start = self.block_ends[i - 1] if i else 0
        return self.blocks[i][start - block_start :] + "".join(self.blocks[i + 1 :])

    @property
    def size(self) -> int:
        return self.ends[-1] if self.ends else 0


class StreamBuffer:
    def __init__(self, task_id: str, turn_id: str, fanout: Callable[[Event], None] | None = None):
        self.task_id = task_id
        self.turn_id = turn_id
        self._fanout = fanout  # the registry's feeds of every task's non-delta events
        self.seq = 0
        self.ended = False
        self.ended_at: float | None = None
        self._entries: list[Event | _Run] = []  # events and _Runs in seq order
        self._firsts = array("q")  # first seq of each entry
        self._waiter: asyncio.Future[None] | None = None
        self._size = 0  # approximate bytes, for eviction
        self.successor: StreamBuffer | None = None  # the task's next buffer: follow-subscribers go on there

    @property
    def state(self) -> BufferState:
        return BufferState.completed if self.ended else BufferState.active

    @property
    def size(self) -> int:
        return self._size + sum(e.size for e in self._entries if type(e) is _Run)

    def carry(self, ended: StreamBuffer) -> None:
        """Start from the events of `ended` (the same turn's buffer) but its terminal one: the turn's end is told
        again (a wait the person stopped). Numbering goes on after it, so a reader that saw it misses nothing."""
        entries = ended._entries[:-1] if ended.ended else ended._entries
        self._entries = list(entries)
        self._firsts = array("q", ended._firsts[: len(entries)])
        self.seq = ended.seq
        self._size = ended._size

    # -- producer side (never awaits) --

    def append_delta(self, kind: int, part_id: int, text: str) -> None:
        seq = self.seq = self.seq + 1
        entries = self._entries
        last = entries[-1] if entries else None
        if type(last) is not _Run or last.part_id != part_id or last.kind != kind:
            last = _Run(kind, part_id, seq)
            entries.append(last)
            self._firsts.append(seq)
        last.add(text, seq)
        if (waiter := self._waiter) is not None:
            self._wake(waiter)

    def publish(self, event: Event) -> None:
        """Number and append a non-delta event. Events after the terminal one are dropped."""
        if self.ended:
            return
        self.seq += 1
        event.seq = self.seq
        self._entries.append(event)
        self._firsts.append(self.seq)
        self._size += 256
        if type(event) is TurnEnded:
            self.ended = True
            self.ended_at = time.monotonic()
        if (waiter := self._waiter) is not None:
            self._wake(waiter)
        if self._fanout is not None:
            self._fanout(event)

    def _wake(self, waiter: asyncio.Future[None]) -> None:
        self._waiter = None
        if not waiter.done():
            waiter.set_result(None)

    # -- reader side --

    def read(self, after_seq: int = 0, deltas: bool = True) -> list[Event]:
        """Events after `after_seq`, deltas coalesced per run (or left out)."""
        if after_seq >= self.seq:
            return []
        i = max(bisect_right(self._firsts, after_seq) - 1, 0)
        out: list[Event] = []
        for entry in self._entries[i:]:
            if type(entry) is _Run:
                if entry.last_seq <= after_seq or not deltas:
                    continue
                cls = TextDelta if entry.kind == TEXT_KIND else ReasoningDelta
                out.append(
                    cls.model_construct(
                        task_id=self.task_id,
                        turn_id=self.turn_id,
                        seq=entry.last_seq,
                        part_id=entry.part_id,
                        text=entry.text_after(after_seq),
                    )
                )
            elif entry.seq > after_seq:
                out.append(entry)
        return out

    async def subscribe(self, after_seq: int = 0, deltas: bool = True) -> AsyncIterator[Event]:
        pos = after_seq
        while True:
            events = self.read(pos, deltas)
            for ev in events:
                yield ev
            # Without deltas a read can be empty while seq moved on: remember how far it looked.
            pos = max(pos, events[-1].seq) if events else (pos if deltas else self.seq)
            if self.ended and pos >= self.seq:
                return
            if not events:
                if self._waiter is None:
                    self._waiter = asyncio.get_running_loop().create_future()
                await asyncio.shield(self._waiter)


class _Feed:
    __slots__ = ("events", "waiter")

    def __init__(self) -> None:
        self.events: deque[Event] = deque()
        self.waiter: asyncio.Future[None] | None = None


class BufferRegistry:
    """One buffer per task; evicts completed buffers by age or under a memory budget."""

    def __init__(self, *, ttl_seconds: float = 900.0, budget_bytes: int = 256 * 1024 * 1024):
        self._buffers: dict[str, StreamBuffer] = {}
        self._next: dict[str, asyncio.Future[None]] = {}  # follow-subscribers waiting for a task's next turn
        self._feeds: set[_Feed] = set()
        self._closed = False
        self.ttl_seconds = ttl_seconds
        self.budget_bytes = budget_bytes

    def reset(self, task_id: str, turn_id: str) -> StreamBuffer:
        old = self._buffers.get(task_id)
        self.evict()
        buf = self._buffers[task_id] = StreamBuffer(task_id, turn_id, self._fan_out)
        if old is not None:
            old.successor = buf
        waiter = self._next.pop(task_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return buf

    def reopen(self, task_id: str, turn_id: str) -> StreamBuffer:
        """A new buffer for a turn that ended and whose end changes (a wait for the person's answer that ended
        without one): it holds the turn's events so far when they are still in memory. Follow-subscribers take it
        up as the task's next buffer, and go on after the last event they saw (TurnHost.subscribe)."""
        old = self._buffers.get(task_id)
        buf = self.reset(task_id, turn_id)
        if old is not None and old.turn_id == turn_id:
            buf.carry(old)
        return buf

    async def next_buffer(self, task_id: str, current: StreamBuffer | None) -> StreamBuffer | None:
        """The buffer that followed `current` (a new turn began, or its end is told anew), or else the task's
        buffer once it is another than `current`; None once closed."""
        while not self._closed:
            if current is not None and current.successor is not None:
                return current.successor
            buf = self._buffers.get(task_id)
            if buf is not None and buf is not current:
                return buf
            waiter = self._next.get(task_id)
            if waiter is None or waiter.done():
                waiter = self._next[task_id] = asyncio.get_running_loop().create_future()
            await asyncio.shield(waiter)
        return None

    async def feed(self) -> AsyncIterator[Event]:
        """Every task's non-delta events from now on, in order, until the registry closes."""
        feed = _Feed()
        self._feeds.add(feed)
        try:
            while not self._closed:
                while feed.events:
                    yield feed.events.popleft()
                feed.waiter = asyncio.get_running_loop().create_future()
                await feed.waiter
        finally:
            self._feeds.discard(feed)

    def announce(self, event: Event) -> None:
        """An event outside any turn's stream (a new title): to the feeds only."""
        self._fan_out(event)

    def _fan_out(self, event: Event) -> None:
        for feed in self._feeds:
            feed.events.append(event)
            if feed.waiter is not None and not feed.waiter.done():
                feed.waiter.set_result(None)

    def close(self) -> None:
        """End every follow-subscription and feed (the runtime shuts down)."""
        self._closed = True
        for feed in self._feeds:
            if feed.waiter is not None and not feed.waiter.done():
                feed.waiter.set_result(None)
        for waiter in self._next.values():
            if not waiter.done():
                waiter.set_result(None)
        self._next.clear()

    def get(self, task_id: str) -> StreamBuffer | None:
        return self._buffers.get(task_id)

    def state(self, task_id: str) -> BufferState:
        buf = self._buffers.get(task_id)
        return buf.state if buf is not None else BufferState.missing

    def evict(self) -> None:
        now = time.monotonic()
        done = sorted(
            ((b.ended_at, b) for b in self._buffers.values() if b.ended_at is not None), key=lambda e: e[0]
        )
        total = sum(b.size for _, b in done)
        for ended_at, buf in done:
            if now - ended_at > self.ttl_seconds or total > self.budget_bytes:
                total -= buf.size
                del self._buffers[buf.task_id]
