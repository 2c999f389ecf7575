"""One blocking read per live turn per process, shared by every reader of that turn in the process.

A hundred clients following one turn through an API instance would otherwise each block on an XREAD of their own:
a hundred Redis round trips and replies to parse for every batch the worker writes, which is what made a reader's
delay grow with the number of readers. A reader that has caught up asks the turn's `Tail` instead: one XREAD BLOCK
loop (started by the first reader waiting, cancelled once no reader has waited for GRACE seconds, which
frees its connection) keeps the latest entries, and
each waiting reader gets those after its position. A reader whose position the tail cannot serve (it has moved
past it, or the tail belongs to another turn) is told so and reads Redis itself, as before.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from typing import Any

import redis.asyncio

Entry = tuple[bytes, dict[bytes, bytes]]

KEEP = 2000  # entries kept for readers a little behind the tail
GRACE = 0.2  # seconds the loop goes on with no reader waiting (readers come back between batches)


def _seq(entry_id: bytes) -> int:
    return int(entry_id.partition(b"-")[0])


class Tail:
    def __init__(self, client: redis.asyncio.Redis, stream: str, after: int, block_ms: int, page: int):
        self._client = client
        self._stream = stream
        self._block_ms = block_ms
        self._page = page
        self.start = after  # entries after this seq are kept (the first reader's position)
        self.last = after
        self.entries: list[Entry] = []
        self.seqs: list[int] = []  # the entries' seqs, for bisect
        self._new = asyncio.Event()
        self._waiting = 0
        self.error: BaseException | None = None
        self.loop: asyncio.Task[None] | None = None

    def serves(self, pos: int) -> bool:
        """Whether a reader at seq `pos` gets every entry after it from this tail (one ahead of it waits for it)."""
        first = self.seqs[0] - 1 if self.seqs else self.last
        return self.error is None and pos >= max(first, self.start)

    def after(self, pos: int) -> list[Entry]:
        return self.entries[bisect.bisect_right(self.seqs, pos):]

    async def wait(self, pos: int, timeout: float) -> list[Entry]:
        """The entries after `pos` once there are some, or [] after `timeout` seconds. Raises the loop's Redis
        error."""
        self._waiting += 1
        try:
            async with asyncio.timeout(timeout):
                while self.last <= pos and self.error is None:
                    new = self._new
                    await new.wait()
        except TimeoutError:
            return []
        finally:
            self._waiting -= 1
            if not self._waiting:
                asyncio.get_running_loop().call_later(GRACE, self._end_if_idle)
        if self.error is not None:
            raise self.error
        return self.after(pos)

    def _end_if_idle(self) -> None:
        if not self._waiting and self.loop is not None:
            self.loop.cancel()

    async def run(self) -> None:
        try:
            while True:
                got = await self._client.xread({self._stream: f"{self.last}-0"}, count=self._page,
                                               block=self._block_ms)
                if not got:
                    continue
                self.entries.extend(got[0][1])
                self.seqs.extend(_seq(entry_id) for entry_id, _ in got[0][1])
                del self.entries[:-KEEP], self.seqs[:-KEEP]
                self.last = self.seqs[-1]
                self._new.set()
                self._new = asyncio.Event()
        except Exception as error:  # told to the readers waiting, who retry as they would with their own read
            self.error = error
            self._new.set()


class Tails:
    """The tails of one process's readers, by stream and turn."""

    def __init__(self, client: redis.asyncio.Redis, block_ms: int, page: int):
        self._client = client
        self._block_ms = block_ms
        self._page = page
        self._tails: dict[tuple[str, str], Tail] = {}

    async def read(self, stream: str, turn: str, pos: int) -> list[Any] | None:
        """What an XREAD BLOCK after `pos` would give a reader of `turn` (entries, or [] when nothing came within
        the block time); None when the shared tail cannot serve this position: the reader reads Redis itself."""
        tail = self._tails.get((stream, turn))
        if tail is None or tail.loop is None or tail.loop.done():
            tail = self._tails[(stream, turn)] = Tail(self._client, stream, pos, self._block_ms, self._page)
            tail.loop = asyncio.ensure_future(tail.run())
            tail.loop.add_done_callback(lambda _: self._forget(stream, turn, tail))
        if not tail.serves(pos):
            return None
        if ready := tail.after(pos):
            return ready
        return await tail.wait(pos, self._block_ms / 1000)

    def _forget(self, stream: str, turn: str, tail: Tail) -> None:
        if self._tails.get((stream, turn)) is tail:
            del self._tails[(stream, turn)]

    async def aclose(self) -> None:
        loops = [tail.loop for tail in self._tails.values() if tail.loop is not None]
        for loop in loops:
            loop.cancel()
        for loop in loops:
            with contextlib.suppress(asyncio.CancelledError):
                await loop
