"""`RemoteRuntime`: a Hearth server under the names the Runtime facade gives this computer's tasks (api.py,
DESIGN.md §3), for a window connected to it: `list_tasks`, `get_task`, `messages`, `create_task`, `send`, `answer`,
`stop`, `subscribe` (with `follow`), `wait_idle`, `events()`, and `tasks` (runtime/remote/tasks.py).

A dropped connection is a state, not an error: `state` is "connected" or "reconnecting" (told to `on_state`), every
stream reconnects with backoff and goes on from the last event it gave, so a panel misses nothing and sees nothing
twice. One feed (`GET /api/events`) serves `events()` and wakes followers when a task's next turn starts or ends; after
a reconnection, followers look again, since what the feed missed is not replayed. Nothing polls, but a task the server
says runs while its turn's stream is not there yet (a queued turn starting) is looked at again each second.

What a server's task cannot do (decided here; `ConfigError` with the sentence): attachments (files on this computer
the server cannot see), planning first, documents to work from, and network for its commands; a new task with no
title is called "New task" (the server wants a goal). While the server is unreachable a send is refused at once
(`ServerUnreachable`: what was typed stays in its box); a send that failed keeps its `client_msg_id` for the same
text, and one cut off after it left is sent again with it, so an input is never stored twice.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import uuid
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

from ..errors import ConfigError, HearthError, ServerUnreachable
from ..events import Event
from ..infos import MessageInfo, TaskInfo
from .client import ServerClient
from .tasks import RemoteTasks, Started
from .tokens import server_url

UNTITLED = "New task"
RECHECK = 1.0  # seconds: a running task whose stream has not begun
LOCAL_ONLY = "works on this computer's tasks only; a server's task cannot have it"


class RemoteRuntime:
    def __init__(self, url: str, token: str, on_state: Callable[[str], None] | None = None):
        self.url = server_url(url)
        self.state = "connected"
        self.on_state = on_state  # a window's bridge sets it once it is built
        self.tasks = RemoteTasks(ServerClient(self.url, token, give_up=None, on_state=self._told))
        self._pulses: dict[str, asyncio.Event] = {}
        self._listeners: set[asyncio.Queue[Event]] = set()
        self._feed: asyncio.Task[None] | None = None
        self._unsent: dict[tuple[str, str], str] = {}

    @classmethod
    async def connect(cls, url: str, token: str, on_state: Callable[[str], None] | None = None) -> RemoteRuntime:
        """The runtime of the server at `url`, its token checked: TokenRefused, ServerUnreachable now, not later."""
        rt = cls(url, token, on_state)
        try:
            await rt.tasks.list()
        except BaseException:
            await rt.aclose()
            raise
        rt._feed = asyncio.create_task(rt._read_feed())
        return rt

    async def aclose(self) -> None:
        if self._feed is not None:
            self._feed.cancel()
            await asyncio.gather(self._feed, return_exceptions=True)
        await self.tasks.aclose()

    def _told(self, state: str) -> None:
        """A stream's state; the runtime's changes with the first to fail and the first the server answers again."""
        if state == "connected":  # a stream is back: what its drop hid may have changed anything
            for pulse in self._pulses.values():
                pulse.set()
            self._pulses.clear()
        if state == self.state:
            return
        self.state = state
        if self.on_state is not None:
            self.on_state(state)

    def _pulse(self, task_id: str) -> asyncio.Event:
        """Set at the task's next feed event (or a reconnection): take it before looking, wait on it after."""
        return self._pulses.setdefault(task_id, asyncio.Event())

    async def _read_feed(self) -> None:
        async for event in self.tasks.client.feed():
            self.tasks.note(event)
            pulse = self._pulses.pop(event.task_id, None)
            if pulse is not None:
                pulse.set()
            for queue in self._listeners:
                queue.put_nowait(event)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Every task's `turn_started`, `turn_ended` and `title`, from now on, until the runtime closes."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._listeners.add(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._listeners.discard(queue)

    # -- reads --

    async def list_tasks(self) -> builtins.list[TaskInfo]:
        return await self.tasks.list()

    async def get_task(self, task_id: str) -> TaskInfo:
        return await self.tasks.get(task_id)

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> builtins.list[MessageInfo]:
        """As `Runtime.messages`: with `limit`, the newest before `before`, or the oldest after `after`."""
        found = await self.tasks.messages(task_id)
        if after is not None:
            found = [m for m in found if m.id > after]
            return found[:limit] if limit is not None else found
        if before is not None:
            found = [m for m in found if m.id < before]
        return found[-limit:] if limit else found

    # -- turns --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False, knowledge: Iterable[str] = (), memory: bool = False,
                          network: bool = False) -> TaskInfo:
        for wanted, what in ((planning, "Planning first"), (tuple(knowledge), "Documents to work from"),
                             (memory, "Memory"), (network, "Network for commands")):
            if wanted:
                raise ConfigError(f"{what} {LOCAL_ONLY}.")
        return await self.tasks.create(title or UNTITLED, model, approval)

    async def send(self, task_id: str, text: str, attachments: Iterable[str] = (), client_msg_id: str | None = None,
                   queue: bool = False) -> Started:
        if tuple(attachments):
            raise ConfigError("Attachments are files on this computer, which the server cannot see: paste the text "
                              "into the message instead.")
        if self.state == "reconnecting":  # refused at once: what was typed stays where it was typed
            raise ServerUnreachable(self.url)
        key = (task_id, text)
        msg_id = client_msg_id or self._unsent.setdefault(key, uuid.uuid4().hex)
        try:
            started = await self._started(self.tasks.send(task_id, text, msg_id, queue))
        except HearthError:
            if client_msg_id is None:
                self._unsent[key] = msg_id  # sent again, it is the same input
            raise
        self._unsent.pop(key, None)
        return started

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False,
                     plan: builtins.list[str] | None = None, rule_command: str | None = None) -> Started:
        if plan is not None:
            raise ConfigError(f"Editing a plan's steps {LOCAL_ONLY}.")
        return await self._started(self.tasks.answer(task_id, request_id, answer, remember=remember,
                                                     rule_command=rule_command))

    async def _started(self, starting: Any) -> Started:
        """The turn a send or an answer started; its stream is left to subscribers (a panel's)."""
        started: Started = await starting
        if started.turn_id is not None:
            await self.tasks.drop_opened(started.turn_id)
        return started

    async def stop(self, task_id: str) -> None:
        await self.tasks.stop(task_id)

    async def wait_idle(self, task_id: str) -> None:
        """Until the server says the task runs no turn."""
        while True:
            pulse = self._pulse(task_id)
            if (await self.tasks.get(task_id)).state != "running":
                return
            await _until(pulse, RECHECK)

    def subscribe(self, task_id: str, after_seq: int = 0, turn_id: str | None = None,
                  follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        """As `Runtime.subscribe`: the current or last turn's events after `after_seq` (of `turn_id`), live ones
        after, ending after its end; with `follow`, every later turn's too, until closed. `deltas=False` leaves
        text and reasoning deltas out."""
        return self._subscribe(task_id, f"{turn_id}:{after_seq}" if turn_id and after_seq else None, follow, deltas)

    async def _subscribe(self, task_id: str, after: str | None, follow: bool,
                         deltas: bool) -> AsyncGenerator[Event, None]:
        path = f"/api/tasks/{task_id}/stream"
        while True:
            pulse = self._pulse(task_id)
            events = self.tasks.client.events(task_id, "GET", path, after=after)
            read = after
            async with contextlib.aclosing(events):
                async for event in events:
                    after = f"{event.turn_id}:{event.seq}"
                    if deltas or event.type not in ("text_delta", "reasoning_delta"):
                        yield event
            if not follow:
                return
            running = (await self.tasks.get(task_id)).state == "running"
            if not running:
                await pulse.wait()  # its next turn, a wait's end, or a reconnection
            elif after == read:
                await _until(pulse, RECHECK)  # runs, but its stream has not begun


async def _until(pulse: asyncio.Event, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(pulse.wait(), timeout)
