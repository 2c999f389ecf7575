"""A server's tasks under the names `rt.tasks` gives this computer's (services/tasks.py), for what a server offers:
`create`, `get`, `list`, `messages`, `turns`, `turn_details`, `send`, `answer`, `stop`, and `follow`, a turn's
events and those of the turns queued after it, until the task is idle.

A send or an answer returns when its turn started (`Started`); its open stream is what `follow` reads first, so a
turn is one request. `is_running` and `running()` say what the server said last: a task read (`get`, `list`), or an
event `note`d (a window's feed: `turn_started`, `turn_ended`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import uuid
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import TypeAdapter

from ..events import EndReason, Event, TurnEnded
from ..infos import MessageInfo, TaskInfo
from .client import ServerClient

NEXT_TURN_POLL = 0.2  # the task still runs but its next turn's stream has not begun
# How the server's answers read.
TASK, TASKS = TypeAdapter(TaskInfo), TypeAdapter(list[TaskInfo])
MESSAGES, ROWS, ROW = TypeAdapter(list[MessageInfo]), TypeAdapter(list[dict]), TypeAdapter(dict)


@dataclass
class Started:
    """What a send or an answer started on the server: the turn, or None when the input was queued."""

    task_id: str
    turn_id: str | None


class RemoteTasks:
    def __init__(self, client: ServerClient):
        self.client = client
        self._opened: dict[str, tuple[Event, AsyncGenerator[Event, None]]] = {}
        self._running: set[str] = set()

    async def aclose(self) -> None:
        for _, events in self._opened.values():
            await events.aclose()
        self._opened.clear()
        await self.client.aclose()

    @staticmethod
    def _path(task_id: str, tail: str = "") -> str:
        return f"/api/tasks/{quote(task_id, safe='')}{tail}"

    # -- what a task holds --

    async def create(self, title: str, model: str | None = None, approval: str = "ask") -> TaskInfo:
        """A new task; `title` is the server's `goal`."""
        body: dict[str, Any] = {"goal": title, "approval": approval, **({"model": model} if model else {})}
        return await self.client.request("POST", "/api/tasks", TASK, body)

    async def get(self, task_id: str) -> TaskInfo:
        task = await self.client.request("GET", self._path(task_id), TASK)
        self._seen(task)
        return task

    async def list(self) -> builtins.list[TaskInfo]:
        tasks = await self.client.request("GET", "/api/tasks", TASKS)
        self._running = {t.id for t in tasks if t.state == "running"}
        return tasks

    def _seen(self, task: TaskInfo) -> None:
        if task.state == "running":
            self._running.add(task.id)
        else:
            self._running.discard(task.id)

    def note(self, event: Event) -> None:
        """A turn started or ended, as a feed told it."""
        if event.type == "turn_started":
            self._running.add(event.task_id)
        elif event.type == "turn_ended":
            self._running.discard(event.task_id)

    async def messages(self, task_id: str) -> builtins.list[MessageInfo]:
        return await self.client.request("GET", self._path(task_id, "/messages"), MESSAGES)

    async def turns(self, task_id: str, turn_ids: Iterable[str] | None = None) -> builtins.list[dict]:
        """The task's turn rows; only those in `turn_ids` when given."""
        rows = await self.client.request("GET", self._path(task_id, "/turns"), ROWS)
        if turn_ids is None:
            return rows
        wanted = set(turn_ids)
        return [row for row in rows if row["id"] in wanted]

    async def turn_details(self, task_id: str, turn_id: str) -> dict:
        return await self.client.request("GET", self._path(task_id, f"/turns/{quote(turn_id, safe='')}"), ROW)

    def is_running(self, task_id: str) -> bool:
        return task_id in self._running

    def running(self) -> builtins.list[str]:
        return sorted(self._running)

    # -- turns --

    async def send(self, task_id: str, text: str, client_msg_id: str | None = None, queue: bool = False) -> Started:
        body: dict[str, Any] = {"text": text, "client_msg_id": client_msg_id or uuid.uuid4().hex, "queue": queue}
        return await self._start(task_id, self._path(task_id, "/messages"), body)

    async def answer(self, task_id: str, request_id: str, answer: str, *, remember: bool = False,
                     rule_command: str | None = None) -> Started:
        body: dict[str, Any] = {"request_id": request_id, "answer": answer, "remember": remember,
                                **({"rule_command": rule_command} if rule_command else {})}
        return await self._start(task_id, self._path(task_id, "/answer"), body)

    async def stop(self, task_id: str) -> None:
        await self.client.request("POST", self._path(task_id, "/abort"), ROW)

    async def drop_opened(self, turn_id: str) -> None:
        """Close the stream a send or an answer opened for `turn_id`, when nothing will `follow` it."""
        opened = self._opened.pop(turn_id, None)
        if opened is not None:
            await opened[1].aclose()

    async def _start(self, task_id: str, path: str, body: dict[str, Any]) -> Started:
        events = self.client.events(task_id, "POST", path, body)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            return Started(task_id, None)  # queued: it runs after the current turn
        self._opened[first.turn_id] = (first, events)
        return Started(task_id, first.turn_id)

    async def follow(self, task_id: str, turn_id: str | None) -> AsyncGenerator[Event, None]:
        """Turn `turn_id`'s events (a send's or an answer's; None: the current turn's) and those of each turn after
        it, until the task is idle. When the server has nothing more buffered (a restarted single box), the task's
        stored ending closes the turn as a `turn_ended`."""
        opened = self._opened.pop(turn_id, None) if turn_id else None
        events = opened[1] if opened else self.client.events(task_id, "GET", self._path(task_id, "/stream"))
        if opened:
            yield opened[0]
        last: Event | None = opened[0] if opened else None
        while True:
            ended = False
            async with contextlib.aclosing(events):
                async for event in events:
                    last, ended = event, event.type == "turn_ended"
                    yield event
            task = await self.get(task_id)
            if task.state != "running":
                if not ended and last is not None:
                    reason = EndReason.waiting if task.state == "waiting" else EndReason(
                        task.last_reason or EndReason.interrupted)
                    yield TurnEnded(task_id=task_id, turn_id=last.turn_id, seq=last.seq + 1, reason=reason,
                                    error=task.last_error)
                return
            if not ended:
                await asyncio.sleep(NEXT_TURN_POLL)
            after = f"{last.turn_id}:{last.seq}" if last is not None else None
            events = self.client.events(task_id, "GET", self._path(task_id, "/stream"), after=after)
