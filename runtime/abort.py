"""Cancellation contract of a turn.

- `Runtime.stop(task_id)` sets the task's abort flag *and*, when a run has registered its controller,
  calls `controller.abort(EndReason.aborted)`. The flag covers a Stop that lands between `send()` and the
  run's registration: the run re-checks it right after registering. `send()` clears a stale flag first.
- `abort()` records the first reason only (a Stop followed by a shutdown stays `aborted`; a shutdown is
  `interrupted`) and cancels the run's work task. Cancellation propagates into whatever the work awaits:
  the provider stream closes its HTTP connection or stops generating, tools kill their process groups and
  cancel their MCP calls, each in their own `finally`.
- The verdict comes from `controller.reason` before any exception: an error raised because of the
  cancellation (a closed socket, a killed process) never turns an abort into an `error`.
"""

from __future__ import annotations

import asyncio

from .events import EndReason


class AbortController:
    __slots__ = ("_work", "reason")

    def __init__(self) -> None:
        self.reason: EndReason | None = None
        self._work: asyncio.Task | None = None

    def bind(self, work: asyncio.Task) -> None:
        self._work = work
        if self.reason is not None:
            work.cancel()

    def abort(self, reason: EndReason) -> bool:
        """Request the end of the run; True when this call set the reason."""
        first = self.reason is None
        if first:
            self.reason = reason
        if self._work is not None and not self._work.done():
            self._work.cancel()
        return first

    @property
    def aborted(self) -> bool:
        return self.reason is not None
