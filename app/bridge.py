"""RuntimeBridge: the one place where the app talks to the runtime (a `runtime.api.Runtime`), turning its
events into Qt signals.

- Every action a widget takes (create, send, answer, stop, rename, delete, reads) goes through here, so the
  sidebar, tray and notifications hear about it through signals.
- A panel watches a task through a `TaskObserver`: one `rt.subscribe()` from the panel's last seen
  (turn, seq). Events are queued and handed over in one batch per frame (~16 ms), consecutive text deltas of
  a part merged, so a 20,000-delta stream costs at most one repaint per frame whatever the token rate.
- For the sidebar, tray and notifications the bridge keeps one monitor per running task that follows it
  across consecutive (queued) turns and re-emits its non-delta events.
- "Continue" uses `Runtime.continue_task` when the runtime offers it (checked with `supports()`), else it
  sends the text "Continue.".
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from .util import error_text, pending_tasks, spawn

log = logging.getLogger(__name__)

FRAME = 0.016  # seconds: at most one batch (and so one repaint) per frame
DELTAS = frozenset({"text_delta", "reasoning_delta"})
# Poll while a finished turn is being cleaned up, to catch a queued input that starts right after it.
_REQUEUE_POLL = 0.05


class TextChunk:
    """Consecutive deltas of one part within one frame, merged. Quacks like a TextDelta/ReasoningDelta."""

    __slots__ = ("part_id", "pieces", "seq", "task_id", "text", "turn_id", "type")

    def __init__(self, ev: Any):
        self.type = ev.type
        self.task_id = ev.task_id
        self.turn_id = ev.turn_id
        self.part_id = ev.part_id
        self.seq = ev.seq
        self.pieces = [ev.text]
        self.text = ""


class TaskObserver(QObject):
    """One panel's subscription to one task's current turn. `batch` carries a list of events (text deltas as
    TextChunk) at most once per frame; `finished` follows the batch with the terminal event, or comes alone
    when the runtime holds nothing for the task."""

    batch = Signal(object)
    finished = Signal()

    def __init__(self, bridge: RuntimeBridge, task_id: str, turn_id: str | None = None, after_seq: int = 0):
        super().__init__()
        self.task_id = task_id
        self.turn_id = turn_id
        self.seq = after_seq
        self.flushes = 0
        self.events = 0
        self._pending: list = []
        self._last_flush = 0.0
        self._closed = False
        self._done = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.timeout.connect(self._flush)
        self._task = spawn(self._run(bridge.rt), bridge.report, long=True)

    async def _run(self, rt) -> None:
        try:
            async for ev in rt.subscribe(self.task_id, self.seq, turn_id=self.turn_id):
                if self._closed:
                    return
                self._add(ev)
        finally:
            self._done = True
            if not self._closed:
                self._schedule()

    def _add(self, ev) -> None:
        self.events += 1
        pending = self._pending
        if ev.type in DELTAS:
            last = pending[-1] if pending else None
            if (type(last) is TextChunk and last.type == ev.type and last.part_id == ev.part_id
                    and last.turn_id == ev.turn_id):
                last.pieces.append(ev.text)
                last.seq = ev.seq
            else:
                pending.append(TextChunk(ev))
        else:
            pending.append(ev)
        self.turn_id = ev.turn_id
        self.seq = ev.seq
        self._schedule()

    def _schedule(self) -> None:
        if self._closed or self._timer.isActive():
            return
        wait = self._last_flush + FRAME - time.perf_counter()
        self._timer.start(max(0, math.ceil(wait * 1000)))

    def _flush(self) -> None:
        if self._closed:
            return
        if self._pending:
            items, self._pending = self._pending, []
            for item in items:
                if type(item) is TextChunk:
                    item.text = "".join(item.pieces)
                    item.pieces = []
            self._last_flush = time.perf_counter()
            self.flushes += 1
            self.batch.emit(items)
        if self._done and not self._pending and not self._closed:
            self._closed = True
            self.finished.emit()

    @property
    def active(self) -> bool:
        return not self._closed

    def close(self) -> None:
        """Stop observing (the turn goes on). Safe to call twice."""
        self._closed = True
        self._timer.stop()
        self._pending = []
        if not self._task.done():
            self._task.cancel()


class RuntimeBridge(QObject):
    task_changed = Signal(str)  # a task's state or metadata may have changed
    tasks_changed = Signal()  # tasks were created or deleted
    turn_event = Signal(str, object)  # non-delta events of any running task
    error = Signal(str)  # an action failed; the text is for a person

    def __init__(self, rt, api):
        super().__init__()
        self.rt = rt
        self.api = api  # the runtime.api module, for its typed errors
        self._known: set[str] = set()
        self._monitors: dict[str, asyncio.Task] = {}
        self._closing = False

    # -- plumbing --

    def report(self, exc: BaseException) -> None:
        names = ("ConfigError", "ProviderError", "TaskBusy", "TaskNotFound", "RequestNotFound")
        typed = tuple(getattr(self.api, n) for n in names if hasattr(self.api, n))
        log.warning("action failed: %s", exc, exc_info=not isinstance(exc, typed))
        self.error.emit(error_text(exc))

    def run(self, coro) -> asyncio.Task:
        """Run an action from a slot; its failure becomes an `error` signal."""
        return spawn(coro, self.report)

    def observe(self, task_id: str, turn_id: str | None = None, after_seq: int = 0) -> TaskObserver:
        return TaskObserver(self, task_id, turn_id, after_seq)

    def supports(self, method: str) -> bool:
        return callable(getattr(self.rt, method, None))

    @property
    def settings(self):
        return self.rt.settings

    @property
    def home(self):
        return self.rt.home

    # -- reads --

    async def list_tasks(self) -> list:
        tasks = await self.rt.list_tasks()
        self._known = {t.id for t in tasks}
        return tasks

    async def get_task(self, task_id: str):
        return await self.rt.get_task(task_id)

    async def messages(self, task_id: str) -> list:
        return await self.rt.messages(task_id)

    async def turns(self, task_id: str) -> list[dict]:
        return await self.rt.turns(task_id)

    def is_running(self, task_id: str) -> bool:
        return self.rt.is_running(task_id)

    def running_tasks(self) -> list[str]:
        return [t for t in self._known | set(self._monitors) if self.rt.is_running(t)]

    # -- actions --

    async def create_task(self, title: str | None = None, model: str | None = None, approval: str = "ask",
                          planning: bool = False):
        info = await self.rt.create_task(title=title or None, model=model or None, approval=approval,
                                         planning=planning)
        self._known.add(info.id)
        self.tasks_changed.emit()
        return info

    async def send(self, task_id: str, text: str, attachments: Iterable[str] = (), queue: bool = False):
        handle = await self.rt.send(task_id, text, attachments=tuple(attachments), queue=queue)
        self._watch(task_id, handle.turn_id)
        self.task_changed.emit(task_id)
        return handle

    async def answer(self, task_id: str, request_id: str, answer: str, remember: bool = False):
        handle = await self.rt.answer(task_id, request_id, answer, remember=remember)
        self._watch(task_id, handle.turn_id)
        self.task_changed.emit(task_id)
        return handle

    async def continue_task(self, task_id: str):
        """Continue after an interrupted or failed turn: the model rebuilds its input from what was saved."""
        if self.supports("continue_task"):
            handle = await self.rt.continue_task(task_id)
            self._watch(task_id, handle.turn_id)
            self.task_changed.emit(task_id)
            return handle
        return await self.send(task_id, "Continue.")

    async def stop(self, task_id: str) -> None:
        await self.rt.stop(task_id)

    async def rename(self, task_id: str, title: str) -> None:
        await self.rt.rename_task(task_id, title)
        self.task_changed.emit(task_id)

    async def delete(self, task_id: str) -> None:
        await self.rt.delete_task(task_id)
        self._known.discard(task_id)
        self.tasks_changed.emit()

    # -- settings (the runtime's SettingsMixin) --

    def presets(self) -> tuple:
        return self.rt.presets()

    async def save_settings(self, data: dict) -> None:
        await self.rt.save_settings(data)

    async def set_api_key(self, name: str, key: str) -> str:
        # The OS keyring may talk D-Bus: keep it off the loop.
        return await asyncio.to_thread(self.rt.set_api_key, name, key)

    async def test_provider(self, provider: dict, api_key: str | None = None) -> list[str]:
        """Models the provider offers. A key typed but not saved yet is stored first: the runtime's
        test_provider() resolves keys through api_key_ref only."""
        if api_key:
            provider = dict(provider, api_key_ref=await self.set_api_key(provider["id"], api_key))
        return await self.rt.test_provider(provider)

    async def list_models(self, provider_id: str) -> list[str]:
        return await self.rt.list_models(provider_id)

    async def detect_local_servers(self) -> dict[str, list[str]]:
        return await self.rt.detect_local_servers()

    def mcp_servers(self) -> list[tuple[str, str, bool]]:
        return self.rt.mcp_servers()

    async def add_mcp_server(self, name: str, cfg: dict, approve: bool) -> str:
        return await self.rt.add_mcp_server(name, cfg, approve=approve)

    async def remove_mcp_server(self, name: str) -> None:
        await self.rt.remove_mcp_server(name)

    async def approve_mcp_server(self, name: str) -> str:
        return await asyncio.to_thread(self.rt.approve_mcp_server, name)

    async def import_mcp_config(self, path: str) -> dict[str, str]:
        return await self.rt.import_mcp_config(path)

    # -- monitors --

    def _watch(self, task_id: str, turn_id: str | None) -> None:
        if self._closing or task_id in self._monitors or not self.rt.is_running(task_id):
            return
        self._monitors[task_id] = spawn(self._monitor(task_id, turn_id), self.report, long=True)

    async def _monitor(self, task_id: str, turn_id: str | None) -> None:
        seq = 0
        try:
            while True:
                async for ev in self.rt.subscribe(task_id, seq, turn_id=turn_id):
                    if ev.turn_id != turn_id:  # a queued input started the next turn
                        turn_id = ev.turn_id
                        self.task_changed.emit(task_id)
                    seq = ev.seq
                    if ev.type not in DELTAS:
                        self.turn_event.emit(task_id, ev)
                        if ev.type == "turn_ended":
                            self.task_changed.emit(task_id)
                if self._closing or not self.rt.is_running(task_id):
                    break
                await asyncio.sleep(_REQUEUE_POLL)
        finally:
            self._monitors.pop(task_id, None)
            if not self._closing:
                self.task_changed.emit(task_id)

    async def aclose(self) -> None:
        """Stop following tasks, then shut the runtime down (running turns end `interrupted`)."""
        self._closing = True
        # Subscriptions (monitors, observers of panels still around) hold no database connection: cancel them.
        subscriptions = [t for t in pending_tasks() if t not in pending_tasks(short_only=True)]
        for task in subscriptions:
            task.cancel()
        await asyncio.gather(*subscriptions, return_exceptions=True)
        # Let actions in flight finish (a send must persist what was typed), then cancel slow leftovers, so
        # nothing touches the database after it is closed.
        others = [t for t in pending_tasks(short_only=True) if t is not asyncio.current_task()]
        if others:
            _done, slow = await asyncio.wait(others, timeout=3.0)
            for task in slow:
                task.cancel()
            await asyncio.gather(*slow, return_exceptions=True)
        await self.rt.aclose()
