"""The channel between a llama.cpp worker thread and the event loop (`providers/llama/worker.py`'s `Job` is one).

The thread converts llama-cpp-python's chunks into provider tuples itself and `_put`s them into a list; the
loop side takes the whole list per `next_batch`. One `call_soon_threadsafe` wake-up per batch: if the loop is
busy, tokens pile up and are delivered together. `finished` completes and `on_finished` runs on the loop once the
thread has exited.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

END = object()  # the last item of every job


class Channel:
    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.stop = threading.Event()  # the consumer is gone: the thread ends at its next check
        self.finished: asyncio.Future[None] = loop.create_future()
        self.on_finished: Callable[[], None] | None = None
        self._items: list[Any] = []
        self._mu = threading.Lock()
        self._notified = False
        self._waiter: asyncio.Future[None] | None = None

    # -- loop side --------------------------------------------------------------------------------------
    async def next_batch(self) -> list[Any]:
        while True:
            with self._mu:
                if self._items:
                    items, self._items = self._items, []
                    self._notified = False
                    return items
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _thread_exited(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)
        callback, self.on_finished = self.on_finished, None
        if callback is not None:
            callback()

    # -- thread side ------------------------------------------------------------------------------------
    def _put(self, item: Any) -> None:
        with self._mu:
            self._items.append(item)
            if self._notified:
                return
            self._notified = True
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody listens any more
            self.stop.set()
