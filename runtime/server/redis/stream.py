"""The resumable stream buffer on Redis: one Redis Stream per task holds its current or last turn, so any API
instance can replay it and follow it live.

Keys: `hearth:stream:<task>` (entries with ids `<seq>-0`; field `e` the event as JSON; a merged text or reasoning
delta also has `f`, the seq of its first chunk, and `o`, the end offset of each of its chunks) and
`hearth:stream:<task>:meta` (a hash: `turn_id`, `state` active|completed). A new turn replaces both in one MULTI;
a completed turn's keys expire after a TTL (15 min by default), then the task's stream is `missing`.

What each side sees when Redis cannot be reached, or comes back without the data:
- The producer never notices: `append_delta` and `publish` only append in memory. The background flusher keeps
  what it could not write, tries again (50 ms, doubling to 2 s, one warning per outage) and, once Redis answers,
  writes it in order: nothing is lost and readers resume without a gap. If Redis came back without this turn's
  stream (restarted with no saved data, or a newer turn reset it), the writer stops streaming the turn for good
  (one warning): the turn goes on and finalizes in the database; readers see `missing` and read the messages.
- A reader retries for `patience` seconds (10 by default) from where it was, then raises `RedisUnavailable`
  (the API answers 503; the client reconnects with its Last-Event-ID and misses nothing that Redis kept).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from array import array
from collections.abc import AsyncIterator, Callable
from itertools import accumulate
from typing import Any

import redis.asyncio

from ...engine.stream_buffer import TEXT_KIND, BufferState
from ...events import ReasoningDelta, TextDelta, TurnEnded, event_adapter
from .common import TRANSIENT, Outage, RedisUnavailable, key, require_bytes
from .tail import Tails

log = logging.getLogger(__name__)

FLUSH_SECONDS = 0.015
COMPLETED_TTL = 15 * 60

# KEYS: stream, meta. ARGV: the turn id; the TTL, or "" unless this batch ends the turn; then four per entry: id,
# event JSON, first seq and offsets ("" and "" for a non-delta event). Nothing is written unless the meta names this
# turn, so a writer whose stream was lost or taken over can never put its events into another turn's stream. An id
# that is already there (a batch sent again after a dropped reply) is skipped, which makes a retry harmless.
_APPEND = """
if redis.call('HGET', KEYS[2], 'turn_id') ~= ARGV[1] then return -1 end
local added = 0
for i = 3, #ARGV, 4 do
  local r
  if ARGV[i + 2] == '' then
    r = redis.pcall('XADD', KEYS[1], ARGV[i], 'e', ARGV[i + 1])
  else
    r = redis.pcall('XADD', KEYS[1], ARGV[i], 'e', ARGV[i + 1], 'f', ARGV[i + 2], 'o', ARGV[i + 3])
  end
  if type(r) == 'string' then added = added + 1 end
end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[2], 'state', 'completed')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return added
"""


def stream_keys(task_id: str) -> list[str]:
    return [key("stream", task_id), key("stream", task_id, "meta")]


class _Run:
    """Consecutive deltas of one part not yet written: the chunks as they came, and their seqs first..last."""

    __slots__ = ("chunks", "first", "kind", "last", "part_id")

    def __init__(self, kind: int, part_id: int, seq: int, text: str):
        self.kind, self.part_id, self.first, self.last = kind, part_id, seq, seq
        self.chunks = [text]


def _nothing(text: str) -> None:
    """The open run's `append` while no run is open (never called: `_part` is None then)."""


class RedisStreamWriter:
    """What a turn produces into, with the in-memory `StreamBuffer`'s producer interface (`task_id`, `turn_id`,
    `seq`, `ended`, `append_delta`, `publish`), and a background flusher that writes to Redis.

    - `append_delta` is the hot path: no I/O, no await, O(1): it counts the seq and appends the chunk to the open
      run of its part. `publish` numbers the event with the next seq (as StreamBuffer does), serialises it, and asks
      for a flush at once; events after the terminal `turn_ended` are dropped. Neither ever raises for Redis.
    - The flusher writes every `flush_seconds` (15 ms) after the first unwritten chunk, or at once after a non-delta
      event: one script call per batch, in seq order. The consecutive deltas of one part in a batch become one entry
      with their merged text and the seq of their last chunk. With the `turn_ended` it marks the meta `completed`
      and sets the TTL on both keys.
    - `reset(*first)` starts a new turn's stream (only under the task's lease); `attach()` goes on with this turn's
      stream from another process (a worker after the API's reset; a reaper ending a dead worker's turn).
    - `flush()` waits until everything published so far is in Redis; `aclose()` flushes and stops the flusher:
      await it before the run reports done, so the `turn_ended` is readable by then. Both take a timeout and return
      False when they could not write everything (Redis down that long, or the stream lost); they never raise for
      Redis. Cancelling `flush()` only stops the waiting; cancelling `aclose()` also stops the flusher, and what it had
      not written is not written.
    """

    def __init__(self, client: redis.asyncio.Redis, task_id: str, turn_id: str, *, ttl: int = COMPLETED_TTL,
                 flush_seconds: float = FLUSH_SECONDS):
        require_bytes(client)
        self.task_id = task_id
        self.turn_id = turn_id
        self.seq = 0
        self.ended = False
        self.detached = False  # the stream no longer holds this turn: nothing more is written
        self._client = client
        self._keys = stream_keys(task_id)
        self._ttl = ttl
        self._every = flush_seconds
        self._append = client.register_script(_APPEND)
        self._pending: list[Any] = []  # _Runs and (seq, json, terminal) in seq order, not yet written
        self._run: _Run | None = None  # the open run (the last pending entry), its part, kind and chunks' append
        self._part: int | None = None
        self._kind = -1
        self._add: Callable[[str], None] = _nothing
        self._written = 0  # the last seq in Redis
        self._due = asyncio.Event()  # a batch should be written now
        self._progress = asyncio.Event()  # set (and replaced) after each write
        self._timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task | None = None
        self._closed = False

    # -- producer side (never awaits) --

    def append_delta(self, kind: int, part_id: int, text: str) -> None:
        self.seq += 1
        if part_id == self._part and kind == self._kind:
            self._add(text)
        else:
            self._open_run(kind, part_id, text)

    def publish(self, event: Any) -> None:
        """Number and queue a non-delta event. Events after the terminal one are dropped."""
        if self.ended or self._closed:
            return
        self._close_run()
        self.seq += 1
        event.seq = self.seq
        terminal = type(event) is TurnEnded
        if terminal:
            self.ended = True
        self._queue((self.seq, _dump(event), terminal))
        self._kick()

    def _open_run(self, kind: int, part_id: int, text: str) -> None:
        if self._closed or self.detached:
            return
        self._close_run()
        run = self._run = _Run(kind, part_id, self.seq, text)
        self._part, self._kind, self._add = part_id, kind, run.chunks.append
        self._queue(run)
        if self._timer is None and not self._due.is_set():
            self._timer = asyncio.get_running_loop().call_later(self._every, self._kick)

    def _close_run(self) -> None:
        """The open run ends with the chunks it has (each of them counted one seq)."""
        if self._run is not None:
            self._run.last = self._run.first + len(self._run.chunks) - 1
            self._run, self._part = None, None

    def _queue(self, entry: Any) -> None:
        if self.detached:
            return
        self._pending.append(entry)
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    def _kick(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.set()

    # -- the flusher --

    async def _flush_loop(self) -> None:
        outage = Outage(f"streaming task {self.task_id}")
        try:
            while True:
                await self._due.wait()
                self._due.clear()
                self._close_run()
                batch, self._pending = self._pending, []
                if batch and not self.detached:
                    await self._write(batch, outage)
        except Exception:  # a bug must not leave flush() waiting: the turn goes on unstreamed
            log.exception("Streaming task %s to Redis failed; the rest of turn %s is not streamed",
                          self.task_id, self.turn_id)
            self._detach()

    async def _write(self, batch: list, outage: Outage) -> None:
        args, last = self._encode(batch)
        while True:
            try:
                added = await self._append(keys=self._keys, args=args)
                break
            except TRANSIENT as error:
                await outage.wait(error)
        outage.over()
        if added < 0:
            log.warning("The Redis stream of task %s no longer holds turn %s (Redis lost it, or a newer turn replaced "
                        "it): the rest of the turn is not streamed; readers read it from the messages",
                        self.task_id, self.turn_id)
            self._detach()
            return
        self._written = last
        self._progress.set()
        self._progress = asyncio.Event()

    def _encode(self, batch: list) -> tuple[list[Any], int]:
        args: list[Any] = [self.turn_id, ""]
        last = self._written
        for entry in batch:
            if type(entry) is _Run:
                cls = TextDelta if entry.kind == TEXT_KIND else ReasoningDelta
                event = cls.model_construct(task_id=self.task_id, turn_id=self.turn_id, seq=entry.last,
                                            part_id=entry.part_id, text="".join(entry.chunks))
                ends = array("I", accumulate(map(len, entry.chunks)))
                args += (f"{entry.last}-0", _dump(event), entry.first, _bytes(ends))
                last = entry.last
            else:
                last, data, terminal = entry
                args += (f"{last}-0", data, "", "")
                if terminal:
                    args[1] = self._ttl
        return args, last

    def _detach(self) -> None:
        self.detached = True
        self._pending = []
        self._progress.set()

    # -- awaiting the writes --

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event produced so far is in Redis: True; False after `timeout` seconds, or when the
        stream was lost (nothing more will be written then)."""
        target = self.seq
        if self._written < target:
            self._kick()
        try:
            async with asyncio.timeout(timeout):
                while self._written < target and not self.detached:
                    await self._progress.wait()
        except TimeoutError:
            return False
        return self._written >= target

    async def aclose(self, timeout: float | None = 10.0) -> bool:
        """Flush (waiting at most `timeout` seconds), then stop the flusher. What was not written by then never is:
        logged, with where readers see the stream stop."""
        written = False
        try:
            written = await self.flush(timeout)
        finally:
            self._closed = True
            self._close_run()
            if self._timer is not None:
                self._timer.cancel()
            if self._flusher is not None:
                self._flusher.cancel()
        if self._flusher is not None:
            await asyncio.wait([self._flusher])
        if not written and not self.detached:
            log.warning("Task %s, turn %s: events %d to %d could not be written to Redis; readers see the stream "
                        "stop at %d and read the rest from the messages", self.task_id, self.turn_id,
                        self._written + 1, self.seq, self._written)
        return written

    # -- the stream's life --

    async def reset(self, *first: Any) -> None:
        """Start this turn's stream: the task's stream and meta are replaced by this turn's (state active), holding
        the `first` events numbered from 1, in one MULTI. Call it under the task's lease only: whatever turn was
        there is thrown away. Raises `RedisUnavailable` when Redis cannot be reached."""
        self.seq, self.ended, self.detached = 0, False, False
        stream, meta = self._keys
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(stream, meta)
                pipe.hset(meta, mapping={"turn_id": self.turn_id, "state": "active"})
                for event in first:
                    self.seq += 1
                    event.seq = self.seq
                    pipe.xadd(stream, {"e": _dump(event)}, id=f"{self.seq}-0")
                await pipe.execute()
        except TRANSIENT as error:
            raise RedisUnavailable(f"starting the stream of task {self.task_id}") from error
        self._written = self.seq

    async def attach(self) -> BufferState:
        """Go on with this turn's stream, numbering after its last entry. Returns its state for this turn: `active`
        (attached); `completed` (it has ended: nothing more is written); `missing` (no stream, or another turn's:
        nothing is written; `reset()` under the lease starts it anew). Raises `RedisUnavailable`."""
        stream, meta = self._keys
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hmget(meta, ["turn_id", "state"])
                pipe.xrevrange(stream, count=1)
                (turn, state), last = await pipe.execute()
        except TRANSIENT as error:
            raise RedisUnavailable(f"opening the stream of task {self.task_id}") from error
        self.detached = turn is None or turn.decode() != self.turn_id
        if self.detached:
            return BufferState.missing
        self.seq = self._written = _seq(last[0][0]) if last else 0
        self.ended = state == b"completed"
        return BufferState(state.decode())


def _dump(event: Any) -> str:
    try:
        return event.model_dump_json()
    except ValueError:  # a lone surrogate (an emoji split across two chunks): a '?' in its place, lengths kept
        return json.dumps(event.model_dump(mode="json"), ensure_ascii=False).encode("utf-8", "replace").decode()


def _bytes(ends: array) -> bytes:
    if sys.byteorder == "big":  # stored little-endian, whatever machine wrote or reads it
        ends.byteswap()
    return ends.tobytes()


def _ends(raw: bytes) -> array:
    ends = array("I")
    ends.frombytes(raw)
    if sys.byteorder == "big":
        ends.byteswap()
    return ends


def _seq(entry_id: bytes) -> int:
    return int(entry_id.partition(b"-")[0])


class RedisStreamReader:
    """Reads tasks' streams from Redis; any number of readers in any number of processes, each at its own pace
    (Redis holds the turn: a slow reader never holds the producer back).

    - `state(task_id)`: (active | completed | missing, the stream's turn id or None).
    - `subscribe(task_id, after_seq, turn_id, deltas)`: the events after `after_seq` (replay), then live ones, ending
      after the terminal `turn_ended` (or at once when the stream is missing or completed with nothing after
      `after_seq`). Deltas come merged as they were written, each with the seq of its last chunk; resuming after a
      seq inside a merged delta gives exactly the rest of its text. A `turn_id` that is not the stream's turn starts
      the stream's turn from its start. A turn replaced while it is read (a new turn reset the stream: its reader
      started before, or its own turn never ended) goes on with the new turn from its start, never mixing the two:
      every event carries its `turn_id`, and each turn begins with its own seq 1. Ends when the stream expires or is
      lost. Cancelling it (a client gone) is safe at any await. Redis errors are retried from where it was for
      `patience` seconds, then `RedisUnavailable`. A waiting reader blocks on one connection for `poll_seconds` at a
      time: the client's socket_timeout, if it has one, must be longer.
    """

    def __init__(self, client: redis.asyncio.Redis, *, patience: float = 10.0, poll_seconds: float = 1.0,
                 page: int = 1000):
        require_bytes(client)
        self._client = client
        self._patience = patience
        self._block_ms = int(poll_seconds * 1000)  # how often a waiting reader looks whether its turn was replaced
        self._page = page
        self._tails = Tails(client, self._block_ms, page)

    async def _live(self, stream: str, turn: str, pos: int) -> list[Any]:
        """The entries after `pos` once there are some, or [] after the block time: from the turn's shared tail
        (redis/tail.py), or from Redis itself where the tail cannot serve `pos`."""
        shared = await self._tails.read(stream, turn, pos)
        if shared is not None:
            return shared
        got = await self._client.xread({stream: f"{pos}-0"}, count=self._page, block=self._block_ms)
        return got[0][1] if got else []

    async def aclose(self) -> None:
        """End the shared tails' reads (the readers' own generators end with their clients)."""
        await self._tails.aclose()

    async def state(self, task_id: str) -> tuple[BufferState, str | None]:
        outage = Outage(f"reading the stream of task {task_id}", self._patience)
        while True:
            try:
                turn, state = await self._client.hmget(stream_keys(task_id)[1], ["turn_id", "state"])  # type: ignore[misc]
                break
            except TRANSIENT as error:
                await outage.wait(error)
        if turn is None:
            return BufferState.missing, None
        return BufferState(state.decode()), turn.decode()

    async def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                        deltas: bool = True) -> AsyncIterator[Any]:
        stream, meta = stream_keys(task_id)
        outage = Outage(f"reading the stream of task {task_id}", self._patience)
        turn, pos = turn_id, after_seq
        while True:
            try:  # the meta and the entries after `pos` as one snapshot, so both are of the same turn
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.hmget(meta, ["turn_id", "state"])
                    pipe.xrange(stream, min=f"({pos}-0", count=self._page)
                    (current, state), entries = await pipe.execute()
            except TRANSIENT as error:
                await outage.wait(error)
                continue
            outage.over()
            if current is None:
                return
            if current.decode() != turn:
                if turn is not None:  # an older turn's position, or the turn was replaced: this turn from its start
                    turn, pos = current.decode(), 0
                    continue
                turn = current.decode()
            while True:
                for entry_id, fields in entries:
                    event = _event(fields, pos, deltas)
                    if event is not None:
                        if event.turn_id != turn:  # the stream was reset meanwhile: look at the meta again
                            break
                        yield event
                        if type(event) is TurnEnded:
                            return
                    pos = _seq(entry_id)
                else:
                    if len(entries) == self._page:  # more to replay
                        break
                    if state == b"completed":  # its end is at or before `pos`: nothing more will come
                        return
                    assert turn is not None  # (the meta's, above)
                    try:
                        entries = await self._live(stream, turn, pos)
                    except TRANSIENT as error:
                        await outage.wait(error)
                        break
                    outage.over()
                    if entries:
                        continue
                break  # nothing for a while (or a reset seen): look at the meta again


def _event(fields: dict[bytes, bytes], after: int, deltas: bool) -> Any:
    """The entry's event, or None for a delta when deltas are left out. `after` inside a merged delta: the rest."""
    first = fields.get(b"f")
    if first is None:
        return event_adapter.validate_json(fields[b"e"])
    if not deltas:
        return None
    event: Any = event_adapter.validate_json(fields[b"e"])
    if int(first) <= after:
        event.text = event.text[_ends(fields[b"o"])[after - int(first)]:]
    return event
