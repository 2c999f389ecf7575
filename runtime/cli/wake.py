"""`hearth wake` (runtime/cli/main.py): run the data folder's wake-ups without the app, until stopped.

A task that ended its turn with `wait` wakes only while a process that owns the data folder runs wake-ups: the app,
`hearth serve` on its own folder, or this command. It opens the folder as its owner (so it cannot run beside the
app: exit 5), starts wake-ups (services/wakeups.py) and prints a line when a task wakes, when its turn ends and when
a background command ends, until Ctrl-C or SIGTERM; then it closes the runtime as a quit does (running turns and
background commands end `interrupted`). A service manager keeps it running (README, "Wake-ups").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING

from ..infos import clock
from .exits import EXIT_OK

if TYPE_CHECKING:
    from ..api import Runtime


async def wake_command(rt: Runtime) -> int:
    rt.wakeups.start()
    waiting = await rt.wakeups.list()
    soonest = next((w for w in waiting if w["due_at"] is not None), None)
    next_one = f"; the next at {clock(soonest['due_at'])}" if soonest else ""
    print(f"hearth wake: running wake-ups ({len(waiting)} task(s) waiting{next_one}). Ctrl-C stops.",
          file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    follow = asyncio.ensure_future(_report(rt))
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    return EXIT_OK


async def _report(rt: Runtime) -> None:
    async for ev in rt.events():
        if ev.type == "activity" and ev.what in ("woke", "background"):
            what = "woke" if ev.what == "woke" else "background command"
            print(f"{clock(time.time())}  task {ev.task_id[:8]} {what}: {ev.detail}", flush=True)
        elif ev.type == "turn_ended":
            print(f"{clock(time.time())}  task {ev.task_id[:8]} turn ended: {ev.reason}", flush=True)
