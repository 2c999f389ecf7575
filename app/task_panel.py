"""A task panel: header with the task's fixed settings, the conversation, the setup phase of a starting turn,
the inline waiting UI and the composer.

The panel is an observer (runtime/ARCHITECTURE.md, "StreamBuffer and subscriptions"): it renders persisted
messages, subscribes to the running turn from
seq 0 of that turn, and is thrown away on close — the turn does not notice. Whenever a turn ends, the panel
reloads from the database (cheap, keyed reconciliation), which also picks up a queued input starting next.
"""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .bridge import RuntimeBridge, TaskObserver
from .composer import Composer
from .conversation import ConversationView
from .waiting import WaitingBox

PHASES = {
    "agent_building": "Preparing the agent…",
    "context_building": "Reading the conversation…",
    "mcp_connecting": "Connecting tools…",
    "agent_running": "Thinking…",
}
APPROVAL_LABELS = {
    "ask": "Asks before changes",
    "auto_edit": "Edits files, asks before commands",
    "full_auto": "Runs everything without asking",
}


class TaskPanel(QWidget):
    title_changed = Signal(str)

    def __init__(self, bridge: RuntimeBridge, info, enter_sends: bool = True, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id: str = info.id
        self.info = info
        self.live_turn: str | None = None
        self.observer: TaskObserver | None = None
        self._observed: str | None = None
        self.waiting: WaitingBox | None = None
        self.loaded = asyncio.Event()
        self.syncs = 0
        self._closed = False
        self._syncing = False
        self._resync = False

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.setObjectName("TaskPanel")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        head = QWidget()
        head.setObjectName("PanelHead")
        head.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        hl = QVBoxLayout(head)
        hl.setContentsMargins(24, 14, 24, 10)
        hl.setSpacing(6)
        top = QHBoxLayout()
        self.title = QLabel()
        self.title.setObjectName("PanelTitle")
        top.addWidget(self.title, 1)
        folder = QPushButton("Open folder")
        folder.setToolTip("Open this task's workspace folder")
        folder.clicked.connect(self.open_workspace)
        top.addWidget(folder)
        hl.addLayout(top)
        chips = QHBoxLayout()
        chips.setSpacing(6)
        for text in (info.model, APPROVAL_LABELS.get(info.approval, info.approval),
                     "Planning on" if info.planning else "Planning off"):
            chip = QLabel(text)
            chip.setObjectName("Chip")
            chip.setToolTip("Chosen when the task was created; fixed for the task's life.")
            chips.addWidget(chip)
        chips.addStretch(1)
        hl.addLayout(chips)
        lay.addWidget(head)

        self.conversation = ConversationView()
        self.conversation.continue_clicked.connect(self._continue)
        lay.addWidget(self.conversation, 1)

        bottom = QWidget()
        bottom.setObjectName("PanelBottom")
        bottom.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(24, 6, 24, 14)
        bl.setSpacing(6)
        self.phase = QLabel()
        self.phase.setObjectName("Phase")
        self.phase.hide()
        bl.addWidget(self.phase)
        self.waiting_slot = QVBoxLayout()
        bl.addLayout(self.waiting_slot)
        self.composer = Composer()
        self.composer.set_enter_sends(enter_sends)
        self.composer.submitted.connect(self._on_submit)
        self.composer.stop_requested.connect(self._on_stop)
        bl.addWidget(self.composer)
        lay.addWidget(bottom)
        self._set_title(info)
        self.bridge.run(self.sync())

    # -- loading --

    async def sync(self) -> None:
        """Reload from the database and (re)attach to the running turn. Calls while one runs coalesce."""
        if self._syncing:
            self._resync = True
            return
        self._syncing = True
        try:
            while not self._closed:
                self._resync = False
                # Sampled before reading: if no turn ran then, what we read is final (finalize commits
                # before the turn stops counting as running); if one ran, its replay covers the rest.
                was_running = self.bridge.is_running(self.task_id)
                info = await self.bridge.get_task(self.task_id)
                messages = await self.bridge.messages(self.task_id)
                turns = await self.bridge.turns(self.task_id)
                if self._closed:
                    return
                self._apply_sync(info, messages, turns, was_running)
                if not self._resync:
                    break
        finally:
            self._syncing = False

    def _apply_sync(self, info, messages: list, turns: list[dict], was_running: bool) -> None:
        self.syncs += 1
        running = self.bridge.is_running(self.task_id)
        # Only a turn this runtime is running is live; a "streaming" row without one (another process, a
        # crash not yet recovered) is shown from its checkpointed parts instead of waiting forever.
        live = next((m.turn_id for m in reversed(messages) if m.role == "assistant" and m.status == "streaming"),
                    None) if was_running else None
        self.info = info
        self._set_title(info)
        self.live_turn = live
        self.conversation.sync(messages, turns, live, running)
        pending = info.pending_request if info.state == "waiting" and not running else None
        self._set_waiting(pending)
        self.conversation.mark_waiting(pending.get("call_id") if pending else None)
        self.composer.set_running(running)
        if live is not None:
            if self.observer is None or not self.observer.active or self._observed != live:
                self._observe(live)
        else:
            self._drop_observer()
            self.phase.hide()
            if running:  # a queued input is starting; its turn row appears in a moment
                QTimer.singleShot(100, lambda: None if self._closed else self.bridge.run(self.sync()))
        self.loaded.set()

    def _set_title(self, info) -> None:
        title = info.title or "New task"
        if self.title.text() != title:
            self.title.setText(title)
            self.title_changed.emit(title)

    # -- live --

    def _observe(self, turn_id: str) -> None:
        self._drop_observer()
        self._observed = turn_id
        self.conversation.reset_live()
        self.observer = self.bridge.observe(self.task_id, turn_id, 0)
        self.observer.batch.connect(self._on_batch)
        self.observer.finished.connect(self._on_finished)
        self._show_phase("Starting…")

    def _drop_observer(self) -> None:
        if self.observer is not None:
            self.observer.close()
            self.observer.deleteLater()
            self.observer = None
        self._observed = None

    def _on_batch(self, items: list) -> None:
        if self._closed:
            return
        if any(ev.turn_id != self.live_turn for ev in items):  # the buffer moved on to another turn
            self._drop_observer()
            self.bridge.run(self.sync())
            return
        self.conversation.apply(items)
        for ev in items:
            t = ev.type
            if t == "status":
                self._show_phase(PHASES.get(str(ev.phase), str(ev.phase)))
            elif t == "text_delta":
                self._show_phase("Writing…")
            elif t == "reasoning_delta":
                self._show_phase("Thinking…")
            elif t == "tool_call":
                state = str(ev.state)
                self._show_phase(f"Running {ev.name}…" if state == "running" else "Thinking…")
            elif t == "aborted":
                self._show_phase("Stopping…")
            elif t == "turn_ended":
                self.phase.hide()

    def _on_finished(self) -> None:
        if not self._closed:
            self.bridge.run(self.sync())

    def _show_phase(self, text: str) -> None:
        self.phase.setText(f"● {text}")
        self.phase.show()

    # -- waiting --

    def _set_waiting(self, request: dict | None) -> None:
        rid = request.get("request_id") if request else None
        if self.waiting is not None and self.waiting.request_id == rid:
            return
        if self.waiting is not None:
            self.waiting.deleteLater()
            self.waiting = None
        if request:
            self.waiting = WaitingBox(request)
            self.waiting.answered.connect(self._on_answer)
            self.waiting_slot.addWidget(self.waiting)

    def _on_answer(self, request_id: str, answer: str, remember: bool) -> None:
        async def go():
            try:
                await self.bridge.answer(self.task_id, request_id, answer, remember)
            except Exception:
                if self.waiting is not None:
                    self.waiting.reenable()
                raise
            await self.sync()

        self.bridge.run(go())

    # -- actions --

    def _on_submit(self, text: str, files: list[str]) -> None:
        queue = self.bridge.is_running(self.task_id)

        async def go():
            try:
                try:
                    await self.bridge.send(self.task_id, text, files, queue=queue)
                except self.bridge.api.TaskBusy:  # it started running meanwhile: queue instead
                    await self.bridge.send(self.task_id, text, files, queue=True)
            except Exception:
                self.composer.restore(text, files)
                raise
            await self.sync()

        self.bridge.run(go())

    def _on_stop(self) -> None:
        self._show_phase("Stopping…")
        self.bridge.run(self.bridge.stop(self.task_id))

    def _continue(self) -> None:
        async def go():
            await self.bridge.continue_task(self.task_id)
            await self.sync()

        self.bridge.run(go())

    def open_workspace(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(self.info.workspace))

    def focus_composer(self) -> None:
        self.composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    # -- reading back --

    def turn_text(self, turn_id: str) -> str:
        return self.conversation.turn_text(turn_id)

    def close_panel(self) -> None:
        """Stop observing; the turn goes on."""
        self._closed = True
        self._drop_observer()
