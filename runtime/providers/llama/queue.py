"""Who generates next on a loaded llama.cpp model (used by `providers/llama/provider.py`; one `ModelQueue` per model and
event loop).

A person's turn goes first. Requests wait in two classes, each in FIFO order: turns (`ModelRequest.purpose`
"turn") before background side requests (a title, memory extraction). A turn that arrives while a side request
holds the model preempts it: the side request's stop event is set, its worker thread ends at its next token
(or prompt piece) and puts the conversation's KV cache back before it lets go of the model (providers/llama/worker.py),
and the provider starts the side request over once no turn waits. So a background job delays the person's
next turn by one token, never by its whole generation; the job pays with the tokens it has to redo.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class Ticket:
    """One request's claim on the model: granted, then released when its worker thread has exited."""

    __slots__ = ("granted", "preempted", "stop", "urgent")

    def __init__(self, urgent: bool, granted: asyncio.Future[None]):
        self.urgent = urgent  # a person's turn
        self.granted = granted
        self.preempted = False  # a turn needs the model: a side request stops and starts over later
        self.stop: threading.Event | None = None  # its generation's stop event, once it runs

    def preempt(self) -> None:
        self.preempted = True
        if self.stop is not None:
            self.stop.set()


class ModelQueue:
    def __init__(self) -> None:
        self.holder: Ticket | None = None
        self._waiting: deque[Ticket] = deque()

    def turn_ahead(self) -> bool:
        """A turn holds the model or waits for it: a new turn waits for a whole generation (a side request
        ahead of it would only cost a token)."""
        return (self.holder is not None and self.holder.urgent) or any(t.urgent for t in self._waiting)

    async def acquire(self, urgent: bool) -> Ticket:
        ticket = Ticket(urgent, asyncio.get_running_loop().create_future())
        if self.holder is None:
            self.holder = ticket
            return ticket
        if urgent and not self.holder.urgent:
            self.holder.preempt()
        self._waiting.append(ticket)
        try:
            await ticket.granted
        except asyncio.CancelledError:
            if ticket in self._waiting:
                self._waiting.remove(ticket)
            else:  # granted as it was cancelled: hand the model on
                self.release(ticket)
            raise
        return ticket

    def release(self, ticket: Ticket) -> None:
        if self.holder is not ticket:
            return
        self.holder = None
        while self._waiting:
            following = next((t for t in self._waiting if t.urgent), self._waiting[0])
            self._waiting.remove(following)
            if not following.granted.done():  # else cancelled while waiting: its task has not run yet
                self.holder = following
                following.granted.set_result(None)
                return
