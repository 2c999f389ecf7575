"""Wake-ups (`rt.wakeups`): a task that ended its turn with `wait` (tools/waiting.py) starts its next turn by
itself when the time comes or the background command it waits for ends (runtime/ARCHITECTURE.md, "Wake-ups").

A wake-up is a row (`wakeups`, one per task), so it outlives a quit or a crash. The process that owns the data folder
and runs them (`start()`: the app, `hearth serve` on its own folder, `hearth wake`) keeps one scheduler: it reads
the rows, fires those that are due and sleeps until the nearest time, or until a command ends or a wake-up is set
(nothing is polled). Firing is the host's ordinary send (`Tasks.wake`: the lock, the queue and finalize are the
usual ones) under the client message id `wake:<id>`, and the row is dropped after it: a crash in between fires
the same input again at the next start, which the id makes a duplicate, so a wake-up runs once. Its input says
what happened: the time it waited for and how late it is (late when Hearth was not running: "was not running
then"), or how the command ended (exit code, how long it ran, the tail of its output; "interrupted by the quit"
when a quit or a crash ended it).

The person can resume a wait now or cancel it; their own input, or Stop, cancels it too (`Tasks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from ..errors import TaskBusy, TaskNotFound
from ..events import TaskActivity
from ..infos import clock
from ..tools.shell.background import read_log
from .core import Core
from .tasks import Tasks, cancel_wakeup

log = logging.getLogger(__name__)

LATE_AFTER = 30.0  # seconds past its time after which a wake-up says it is late
MAX_SLEEP = 300.0  # the scheduler looks again at least this often (a clock that jumped)
TAIL_BYTES = 2000  # of a command's output, in the wake-up's input


def span(seconds: float) -> str:
    """A duration in the two largest units: '3 h 5 min', '12 s'."""
    whole = round(seconds)
    parts = [(whole // 86400, "d"), (whole % 86400 // 3600, "h"), (whole % 3600 // 60, "min"), (whole % 60, "s")]
    shown = [f"{n} {unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0 s"


def waiting_for(wake: dict[str, Any], command: dict[str, Any] | None = None) -> str:
    """What a wake-up waits for, in a few words: 'until 14:20:00', 'for `make` to finish'."""
    if wake["command_id"] is not None:
        what = f"`{command['command']}`" if command is not None else f"command {wake['command_id']}"
        return f"for {what} to finish"
    return f"until {clock(wake['due_at'])}"


class Wakeups:
    def __init__(self, core: Core, tasks: Tasks):
        self._core = core
        self._tasks = tasks
        self._opened = time.time()  # a wake-up due before this came due while Hearth was not running
        self._poke = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._firing: dict[str, asyncio.Task[None]] = {}  # by wake-up id
        core.background.listen(self._command_changed)

    # -- what the wait tool and the person do --

    async def set(self, task_id: str, turn_id: str, note: str, due_at: float | None, command_id: str | None) -> str:
        """Keep the task's wake-up (`wait`, tools/waiting.py), replacing the one it had; says when it wakes."""
        self._core.writable()
        wake = {"id": uuid.uuid4().hex, "task_id": task_id, "turn_id": turn_id, "note": note, "due_at": due_at,
                "command_id": command_id, "created_at": time.time()}
        await self._core.store.set_wakeup(wake)
        command = await self._core.store.background_command(command_id) if command_id else None
        said = f"The task waits {waiting_for(wake, command)}"
        self._announce(task_id, "wake_set", said, turn_id)
        self._poke.set()
        if self._runner is None:
            return f"{said}. Nothing runs wake-ups in this process right now; it wakes once Hearth runs them."
        return f"{said}, then your next turn starts by itself."

    async def get(self, task_id: str) -> dict[str, Any] | None:
        """The task's wake-up (`id`, `note`, `due_at` or `command_id`, `created_at`), or None."""
        rows = await self._core.store.wakeups(task_id)
        return rows[0] if rows else None

    async def list(self) -> list[dict[str, Any]]:
        """Every waiting task's wake-up, soonest first (those waiting for a command last)."""
        rows = await self._core.store.wakeups()
        return sorted(rows, key=lambda w: (w["due_at"] is None, w["due_at"] or 0))

    async def cancel(self, task_id: str) -> bool:
        """Cancel the task's wait: it stays as it is until the person sends something. False when it had none."""
        self._core.writable()
        return await cancel_wakeup(self._core, task_id)

    async def resume_now(self, task_id: str) -> bool:
        """Wake the task now instead of later (its input says so); False when it does not wait."""
        self._core.writable()
        wake = await self.get(task_id)
        if wake is None:
            return False
        firing = self._firing.get(wake["id"])
        if firing is None:
            firing = self._fire(wake, early=True)
        await asyncio.shield(firing)
        return True

    # -- the scheduler --

    def start(self) -> None:
        """Run wake-ups in this process from now until it closes: only in the one that owns the data folder."""
        self._core.writable()
        if self._runner is None:
            self._runner = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        tasks = [t for t in (self._runner, *self._firing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._runner = None

    def _command_changed(self, row: dict[str, Any]) -> None:
        self._announce(row["task_id"], "background", f"{row['command']}: {row['status']}", row["turn_id"])
        self._poke.set()

    async def _run(self) -> None:
        store = self._core.store
        while True:
            self._poke.clear()
            try:
                rows = await store.wakeups()
                nearest = MAX_SLEEP
                for wake in rows:
                    if wake["id"] in self._firing:
                        continue
                    if wake["command_id"] is not None:
                        command = await store.background_command(wake["command_id"])
                        if command is None or command["status"] != "running":
                            self._fire(wake)
                    elif wake["due_at"] <= time.time():
                        self._fire(wake)
                    else:
                        nearest = min(nearest, wake["due_at"] - time.time())
            except Exception:  # a database fault: the wake-ups wait for the next look
                log.exception("could not read the wake-ups")
                nearest = MAX_SLEEP
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, nearest)):
                    await self._poke.wait()

    def _fire(self, wake: dict[str, Any], early: bool = False) -> asyncio.Task[None]:
        task = self._firing[wake["id"]] = asyncio.ensure_future(self._wake(wake, early))
        task.add_done_callback(lambda _t: self._firing.pop(wake["id"], None))
        return task

    async def _wake(self, wake: dict[str, Any], early: bool) -> None:
        store, task_id = self._core.store, wake["task_id"]
        try:
            text = await self._what_happened(wake, early)
            while True:
                await self._tasks.wait_idle(task_id)  # the turn that set it may still be ending
                if not any(w["id"] == wake["id"] for w in await store.wakeups(task_id)):
                    return  # cancelled meanwhile (the person's input, Stop)
                try:
                    await self._tasks.wake(task_id, text, f"wake:{wake['id']}")
                except TaskBusy:
                    continue
                except TaskNotFound:
                    pass
                await store.delete_wakeup(task_id, wake["id"])
                self._announce(task_id, "woke", text.split("\n", 1)[0].removeprefix("[Wake-up] "))
                return
        except Exception:
            if not self._core.closed:
                log.exception("the wake-up of task %s failed; it is tried again at the next start", task_id)

    async def _what_happened(self, wake: dict[str, Any], early: bool) -> str:
        """The woken turn's input: what was waited for and why, and what happened."""
        now = time.time()
        store = self._core.store
        command = await store.background_command(wake["command_id"]) if wake["command_id"] else None
        said = f"[Wake-up] You waited {waiting_for(wake, command)} (\"{wake['note']}\")."
        if early:
            return f"{said} The person woke the task now, at {clock(now)}, before that happened."
        if command is None and wake["command_id"] is not None:
            return f"{said} That command is no longer known."
        if command is None:
            late = now - wake["due_at"]
            if wake["due_at"] < self._opened:
                return f"{said} It is now {clock(now)}: {span(late)} late, as Hearth was not running when it came due."
            if late >= LATE_AFTER:
                return f"{said} It is now {clock(now)}: {span(late)} late (the task was busy when it came due)."
            return f"{said} It is now {clock(now)}: on time."
        ran = span((command["ended_at"] or now) - command["started_at"])
        if command["status"] == "exited":
            ended = f"It exited with code {command['exit_code']} after {ran}."
        elif command["status"] == "interrupted":
            ended = (f"It was interrupted by the quit: Hearth quit or was stopped while it ran (after {ran}), "
                     "which ended the command, so it may not have finished its work.")
        else:
            ended = f"The person stopped it after {ran}."
        tail = read_log(command["log_path"], -TAIL_BYTES)
        output = (f"The last of its output ({tail.size} bytes in all):\n{tail.text}" if tail.size
                  else "It printed nothing.")
        return f"{said} {ended} {output}"

    def _announce(self, task_id: str, what: Any, detail: str, turn_id: str | None = None) -> None:
        self._core.buffers.announce(TaskActivity(task_id=task_id, turn_id=turn_id or "", what=what, detail=detail))
