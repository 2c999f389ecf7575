"""Small helpers shared by the widgets: keeping coroutine tasks alive, and human-friendly times/sizes."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import shiboken6
from PySide6.QtCore import QObject

log = logging.getLogger("app")

_tasks: set[asyncio.Task] = set()
_long: set[asyncio.Task] = set()  # subscriptions that live as long as a turn; the rest are short actions


def close_async_generators_on_the_loop() -> None:
    """Have the running loop close an async generator dropped before its end, as asyncio's own loop does: qasync's
    sets no hooks, so the garbage collector closed it outside any task, and the HTTP streams of a server's tasks
    (httpx's generators, which await in their cleanup) failed with "async generator ignored GeneratorExit"."""
    def finalize(agen: Any) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop any more: nothing can run its cleanup
            return
        spawn(agen.aclose())

    sys.set_asyncgen_hooks(finalizer=finalize)


def spawn(coro: Coroutine[Any, Any, Any], on_error: Callable[[BaseException], None] | None = None, *,
          long: bool = False, owner: QObject | None = None, load: bool = False) -> asyncio.Task:
    """Run a coroutine from a slot. The task is kept referenced until done; failures are logged and handed
    to `on_error` (usually a status-bar message), never swallowed. `owner` is the widget it shows its outcome
    in: a `load` (a read) stops when that widget is deleted (its dialog closed); any other action runs to its
    end, and only its attempt to update the deleted widget is dropped."""
    task = asyncio.ensure_future(coro)
    _tasks.add(task)
    if long:
        _long.add(task)
    if owner is not None and load:
        owner.destroyed.connect(lambda *_: task.cancel())

    def done(t: asyncio.Task) -> None:
        _tasks.discard(t)
        _long.discard(t)
        if t.cancelled():
            return
        exc = t.exception()
        if exc is None:
            return
        if owner is not None and not shiboken6.isValid(owner) and isinstance(exc, RuntimeError):
            log.debug("view closed before its action finished: %s", exc)
        elif on_error is not None:
            on_error(exc)
        else:
            log.error("background action failed", exc_info=exc)

    task.add_done_callback(done)
    return task


def pending_tasks(short_only: bool = False) -> set[asyncio.Task]:
    return _tasks - _long if short_only else set(_tasks)


def ago(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return ""
    delta = (now or time.time()) - ts
    if delta < 45:
        return "just now"
    if delta < 3600:
        return f"{max(1, round(delta / 60))} min ago"
    if delta < 86400:
        return f"{round(delta / 3600)} h ago"
    if delta < 2 * 86400:
        return "yesterday"
    return time.strftime("%d %b %Y", time.localtime(ts))


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def error_text(exc: BaseException) -> str:
    """What a person reads: the runtime's typed errors carry readable messages already."""
    text = str(exc).strip()
    return text or type(exc).__name__
