"""Cancellation contract of a turn: one `TurnSlot` per turn is its only Stop state.

- `send()` creates the slot and registers it in the `AbortRegistry` before its first await, so a concurrent
  `send()` sees it (TaskBusy) and a `stop()` that lands at any moment from then on has somewhere to go.
- `slot.abort(reason)` records the first reason only (a Stop followed by a shutdown stays `aborted`; a
  shutdown alone is `interrupted`) and cancels the run's *work* task once one is bound; a slot aborted before
  its run bound the work cancels it on `bind()`. Cancellation propagates into whatever the work awaits: the
  provider stream closes its connection or stops generating, tools kill their process groups and cancel their
  MCP calls, each in their own `finally`.
- The agent loop checks `slot.aborted` before every model request and after every tool call, so a tool that
  swallows the cancellation (returns, or raises something else) cannot let the loop call the model again.
- `aborted` is published by `_announce()`: when the Stop is recorded if the turn's stream already exists, else
  when the stream is attached. The one other place is a Stop of a turn that already ended `waiting` (it has no
  slot any more): engine/host.py tells that turn's stream its end anew.
- `slot.settle(verdict)` is how finalize takes the ending reason: the recorded abort reason wins over the
  verdict it computed (an error a Stop provoked stays `aborted`); from then on the reason is fixed, and a Stop
  that lands during finalize's commit neither changes it nor publishes `aborted`.
- If the work does not end within `GIVE_UP_SECONDS` of an abort (a tool that ignores cancellation), the run
  stops waiting for it and finalizes anyway, so a turn always ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ..events import Aborted, EndReason, Event

GIVE_UP_SECONDS = 10.0


@dataclass(eq=False)
class TurnSlot:
    """What `send()` registers for the task's current turn; also its abort controller."""

    task_id: str
    turn_id: str
    client_msg_id: str | None
    input_message_id: int = 0
    output_message_id: int = 0
    reason: EndReason | None = None
    settled: bool = False
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    gave_up: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    _work: asyncio.Task[None] | None = None
    _publish: Callable[[Event], None] | None = None
    _announced: bool = False
    _give_up: asyncio.TimerHandle | None = None

    @property
    def aborted(self) -> bool:
        return self.reason is not None

    def attach(self, publish: Callable[[Event], None]) -> None:
        """The turn's stream exists now: a Stop recorded earlier is announced on it."""
        self._publish = publish
        self._announce()

    def bind(self, work: asyncio.Task[None]) -> None:
        self._work = work
        if self.reason is not None:
            self._cancel_work()

    def abort(self, reason: EndReason) -> bool:
        """Request the end of the turn; True when this call recorded the reason."""
        if self.settled:
            return False
        first = self.reason is None
        if first:
            self.reason = reason
        self._cancel_work()
        self._announce()
        return first

    def settle(self, verdict: EndReason) -> EndReason:
        """Finalize takes the ending reason: a recorded abort wins; afterwards it cannot change."""
        self.settled = True
        if self._give_up is not None:
            self._give_up.cancel()
        return self.reason or verdict

    def _cancel_work(self) -> None:
        if self._work is None or self._work.done():
            return
        self._work.cancel()
        if self._give_up is None:
            self._give_up = asyncio.get_running_loop().call_later(GIVE_UP_SECONDS, self._stop_waiting)

    def _stop_waiting(self) -> None:
        """The work ignored the abort for GIVE_UP_SECONDS: the run finalizes without it."""
        if not self.gave_up.done():
            self.gave_up.set_result(None)

    def _announce(self) -> None:
        if self.reason == EndReason.aborted and not self._announced and self._publish is not None:
            self._announced = True
            self._publish(Aborted(task_id=self.task_id, turn_id=self.turn_id))

    def release(self) -> None:
        if self._give_up is not None:
            self._give_up.cancel()
        if not self.done.done():
            self.done.set_result(None)


class AbortRegistry:
    """The slot of each task's current turn (the desktop implementation of the abort-registry port), and the
    slots of turns whose end is announced while their cleanup goes on."""

    def __init__(self) -> None:
        self._slots: dict[str, TurnSlot] = {}
        self._ending: dict[str, set[TurnSlot]] = {}

    def get(self, task_id: str) -> TurnSlot | None:
        return self._slots.get(task_id)

    def register(self, slot: TurnSlot) -> None:
        self._slots[slot.task_id] = slot

    def free(self, slot: TurnSlot) -> None:
        """The turn's end is being announced: from now on the task takes its next input (that turn's run waits
        for the task's lock, which the cleanup still holds), while `wait_idle()` still waits for the cleanup."""
        if self._slots.get(slot.task_id) is slot:
            del self._slots[slot.task_id]
            self._ending.setdefault(slot.task_id, set()).add(slot)

    def ending(self, task_id: str) -> TurnSlot | None:
        """A freed slot of the task whose turn is still being cleaned up."""
        return next(iter(self._ending.get(task_id, ())), None)

    def idle(self, task_id: str) -> bool:
        """No turn of the task runs or is being cleaned up."""
        return task_id not in self._slots and task_id not in self._ending

    def release(self, slot: TurnSlot) -> None:
        """The turn is over and cleaned up: `wait_idle()` returns."""
        if self._slots.get(slot.task_id) is slot:
            del self._slots[slot.task_id]
        ending = self._ending.get(slot.task_id)
        if ending is not None:
            ending.discard(slot)
            if not ending:
                del self._ending[slot.task_id]
        slot.release()

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._slots

    def slots(self) -> list[TurnSlot]:
        return list(self._slots.values())
