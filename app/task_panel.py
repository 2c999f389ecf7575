"""A task panel: header with the task's fixed settings, the windowed conversation, the setup phase of a starting
turn, the inline waiting UI and the composer.

The panel is an observer (runtime/ARCHITECTURE.md, "StreamBuffer and subscriptions"). It opens at the task's
last page of messages, then follows the task with one subscription across all its turns; it is thrown away on
close and the turns do not notice. Reads are incremental: a new turn reads the messages after the newest one the
panel knows, a finished turn re-reads its own message — nothing re-reads or re-lays out the whole conversation.

Events of a turn go to that turn's live `Message` (and its item when rendered). A turn whose message the panel
has not read yet keeps its events aside until it has; a turn whose message was already final when read is
ignored (its events are a replay of what the message holds).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from .bridge import RuntimeBridge, TaskObserver
from .composer import Composer
from .conversation import PAGE, ConversationView, Message
from .model_picker import ModelDialog
from .waiting import WaitingBox

if TYPE_CHECKING:
    from runtime.api import MessageInfo, TaskInfo

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
    settings_requested = Signal()
    task_forked = Signal(str)  # the new task's id

    def __init__(self, bridge: RuntimeBridge, info: TaskInfo, enter_sends: bool = True, view_state=None,
                 parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id: str = info.id
        self.info = info
        self.observer: TaskObserver | None = None
        self.waiting: WaitingBox | None = None
        self.loaded = asyncio.Event()
        self.live: dict[str, Message] = {}  # turn id -> its assistant message while the turn runs
        self._final: set[str] = set()  # turns whose message was final when read: their events are a replay
        self._early: dict[str, list] = {}  # events of turns whose message is not read yet
        self._fetching: asyncio.Task | None = None
        self._finishing = 0  # ended turns whose saved message is being read back
        self.last_id = 0  # the newest message id the panel has read
        self._view_state = view_state
        self._closed = False

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
        other = QPushButton("Another model…")
        other.setObjectName("Link")
        other.setToolTip("Continue this conversation in a new task with another model")
        other.clicked.connect(self.choose_other_model)
        chips.addWidget(other)
        chips.addStretch(1)
        hl.addLayout(chips)
        lay.addWidget(head)

        self.conversation = ConversationView()
        self.conversation.continue_clicked.connect(self._continue)
        self.conversation.older_wanted.connect(lambda: self.bridge.run(self._load_older()))
        self.conversation.newer_wanted.connect(lambda: self.bridge.run(self._load_newer()))
        self.conversation.latest_wanted.connect(lambda: self.bridge.run(self._open_page()))
        self.conversation.send_now_clicked.connect(self._send_now)
        self.conversation.discard_clicked.connect(self._discard)
        self.conversation.retry_clicked.connect(self._retry)
        self.conversation.settings_clicked.connect(self.settings_requested)
        self.conversation.fork_clicked.connect(self.choose_other_model)
        self.conversation.edit_clicked.connect(self._start_edit)
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
        self.bridge.run(self._start())

    @property
    def live_turn(self) -> str | None:
        return next(iter(self.live), None)

    @property
    def settled(self) -> bool:
        """No turn runs and every ended turn is shown as it was saved."""
        return not self.live and not self._finishing and not self.composer.running

    # -- reading --

    async def _start(self) -> None:
        anchor, offset, expanded = self._view_state or (None, 0, set())
        if anchor is None:
            await self._open_page()
        else:
            await self._open_around(anchor)
        if self._closed:
            return
        self.conversation.expand_calls(expanded)
        self.conversation.restore_view(anchor, offset)
        self.observer = self.bridge.observe(self.task_id)
        self.observer.batch.connect(self._on_batch)
        self.loaded.set()

    async def _messages(self, infos: list[MessageInfo]) -> list[Message]:
        """Messages for the view, with their turn rows; a running turn's answer becomes live (its events,
        replayed from the start, fill it)."""
        turn_ids = {m.turn_id for m in infos if m.role == "assistant" and m.turn_id}
        turns = {t["id"]: t for t in await self.bridge.turns(self.task_id, turn_ids)} if turn_ids else {}
        if self._closed:
            return []
        out = []
        for info in infos:
            live = self.live.get(info.turn_id) if info.role == "assistant" else None
            if live is not None:
                out.append(live)
                continue
            m = Message.of(info, turns.get(info.turn_id))
            if m.role == "assistant" and m.status == "streaming" and m.turn_id not in self._final:
                m.live, m.parts = True, []
                self.live[m.turn_id] = m
                for batch in self._early.pop(m.turn_id, []):
                    self._route_known(m, batch)
            elif m.role == "assistant" and m.turn_id:
                self._final.add(m.turn_id)
            out.append(m)
            self.last_id = max(self.last_id, info.id)
        return out

    async def _open_page(self, at_top: bool = False) -> None:
        """The newest page (or the first one): what opening a task shows, at once."""
        if at_top:
            infos = await self.bridge.messages(self.task_id, after=0, limit=PAGE + 1)
            more, infos = len(infos) > PAGE, infos[:PAGE]
        else:
            infos = await self.bridge.messages(self.task_id, limit=PAGE + 1)
            more, infos = len(infos) > PAGE, infos[-PAGE:]
        info = await self.bridge.get_task(self.task_id)
        messages = await self._messages(infos)
        if self._closed:
            return
        if at_top:
            self.conversation.show_page(messages, has_older=False, has_newer=more, at_top=True)
        else:
            self.conversation.show_page(messages, has_older=more, has_newer=False)
        self._apply_info(info)

    async def _open_around(self, anchor: int) -> None:
        """The pages around a message the person was reading when they left the task."""
        before = await self.bridge.messages(self.task_id, before=anchor + 1, limit=PAGE + 1)
        after = await self.bridge.messages(self.task_id, after=anchor, limit=PAGE + 1)
        info = await self.bridge.get_task(self.task_id)
        older, newer = len(before) > PAGE, len(after) > PAGE
        messages = await self._messages(before[-PAGE:] + after[:PAGE])
        if newer:  # know the newest message (and a turn running there) without showing it yet
            await self._messages(await self.bridge.messages(self.task_id, limit=1))
        if self._closed:
            return
        self.conversation.show_page(messages, has_older=older, has_newer=newer, at_top=True)
        self._apply_info(info)

    async def _load_older(self) -> None:
        first = self.conversation.messages[0].id if self.conversation.messages else None
        try:
            infos = await self.bridge.messages(self.task_id, before=first, limit=PAGE + 1)
        except Exception:
            self.conversation.page_failed()
            raise
        more, infos = len(infos) > PAGE, infos[-PAGE:]
        messages = await self._messages(infos)
        if not self._closed:
            self.conversation.add_older(messages, more)

    async def _load_newer(self) -> None:
        last = self.conversation.messages[-1].id if self.conversation.messages else 0
        infos = await self.bridge.messages(self.task_id, after=last, limit=PAGE + 1)
        more, infos = len(infos) > PAGE, infos[:PAGE]
        messages = await self._messages(infos)
        if not self._closed:
            self.conversation.add_newer(messages, more)

    async def sync(self) -> None:
        """What changed since the panel last looked: task state and the messages after the newest it knows.
        Cheap at any task length (one page read at most)."""
        if self._fetching is not None and not self._fetching.done():
            await asyncio.shield(self._fetching)
        self._fetching = asyncio.ensure_future(self._read_new())
        await asyncio.shield(self._fetching)

    async def _read_new(self) -> None:
        info = await self.bridge.get_task(self.task_id)
        infos = await self.bridge.messages(self.task_id, after=self.last_id)
        messages = await self._messages(infos)
        if self._closed:
            return
        if messages and not self.conversation.has_newer:
            self.conversation.add_newer(messages, False)
        elif messages:
            self.conversation.note_live_activity()
        self._apply_info(info)

    async def _refresh_message(self, message: Message) -> None:
        """Re-read one message (its turn ended, or it left the queue) and show it as saved."""
        infos = await self.bridge.messages(self.task_id, after=message.id - 1, limit=1)
        if not infos or infos[0].id != message.id or self._closed:
            return
        turns = await self.bridge.turns(self.task_id, [infos[0].turn_id]) if infos[0].turn_id else []
        if self._closed:
            return
        fresh = Message.of(infos[0], turns[0] if turns else None)
        if fresh.role == "assistant" and fresh.turn_id:
            self._final.add(fresh.turn_id)
        self.conversation.update_message(fresh)

    def _apply_info(self, info: TaskInfo) -> None:
        self.info = info
        self._set_title(info)
        running = self.bridge.is_running(self.task_id)
        self.composer.set_running(running)
        self.conversation.set_running(running)
        pending = info.pending_request if info.state == "waiting" and not running else None
        self._set_waiting(pending)
        self.conversation.mark_waiting(pending.get("call_id") if pending else None)
        if not running:
            self.phase.hide()

    def _set_title(self, info: TaskInfo) -> None:
        title = info.title or "New task"
        if self.title.text() != title:
            self.title.setText(title)
            self.title_changed.emit(title)

    # -- live --

    def _on_batch(self, items: list) -> None:
        if self._closed:
            return
        by_turn: dict[str, list] = {}
        for ev in items:
            by_turn.setdefault(ev.turn_id, []).append(ev)
        for turn_id, events in by_turn.items():
            if turn_id in self._final:
                continue
            m = self.live.get(turn_id)
            if m is not None:
                self._route_known(m, events)
            else:
                self._early.setdefault(turn_id, []).append(events)
                if any(ev.type == "turn_started" for ev in events):
                    self._turn_started(turn_id)
            self._show_phases(events)

    def _turn_started(self, turn_id: str) -> None:
        # Only one turn of a task runs at a time: any other live one has ended (its end may not be replayed).
        for other in [t for t in self.live if t != turn_id]:
            self._finish(self.live[other])
        self.composer.set_running(True)
        self.conversation.set_running(True)
        self._set_waiting(None)
        self.bridge.run(self._after_start())

    async def _after_start(self) -> None:
        await self.sync()
        if self._closed:
            return
        # The queued input that started this turn is sent now: show it as such.
        for m in list(self.conversation.messages):
            if m.role == "user" and m.status == "queued":
                await self._refresh_message(m)

    def _route_known(self, m: Message, events: list) -> None:
        m.apply(events)
        item = self.conversation.live_item(m.turn_id)
        if item is not None:
            item.apply(events)
        self.conversation.note_live_activity()
        if any(ev.type == "turn_ended" for ev in events):
            self._finish(m)

    def _finish(self, m: Message) -> None:
        self.live.pop(m.turn_id, None)
        self._final.add(m.turn_id)
        m.live = False
        self.bridge.run(self._finished(m))

    async def _finished(self, m: Message) -> None:
        self._finishing += 1
        try:
            await self._refresh_message(m)
        finally:
            self._finishing -= 1
        await self.sync()
        await self.bridge.wait_idle(self.task_id)  # the composer leaves "running" once the turn is cleaned up
        if not self._closed:
            await self.sync()

    def _show_phases(self, events: list) -> None:
        for ev in events:
            t = ev.type
            if t == "status":
                self._show_phase(ev.detail or PHASES.get(str(ev.phase), str(ev.phase)))
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
                if self.waiting is not None and not self._closed:
                    self.waiting.reenable()
                raise
            await self.sync()

        self.bridge.run(go())

    # -- actions --

    def _on_submit(self, text: str, files: list[str]) -> None:
        if self.composer.is_editing:
            self.composer.editing.hide()
            self.composer.attach.setEnabled(True)
            self._act(lambda: self.bridge.edit_last(self.task_id, text),
                      on_error=lambda: self.composer.start_edit(text))
            return
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

    def _act(self, action, on_error=None) -> None:
        """Run an action that starts a turn, then read what it changed."""
        async def go():
            try:
                await action()
            except Exception:
                if on_error is not None and not self._closed:
                    on_error()
                raise
            await self.sync()

        self.bridge.run(go())

    def _retry(self) -> None:
        self._act(lambda: self.bridge.retry(self.task_id))

    def choose_other_model(self) -> ModelDialog:
        """The task's model is fixed: carry the conversation into a new task on another model."""
        dlg = ModelDialog(self.bridge, self.info.model, self)
        dlg.chosen.connect(self._fork)
        dlg.show()
        self.model_dialog = dlg
        return dlg

    def _fork(self, model: str) -> None:
        async def go():
            info = await self.bridge.fork_task(self.task_id, model)
            self.task_forked.emit(info.id)

        self.bridge.run(go())

    def _start_edit(self, _message_id: int, text: str) -> None:
        self.composer.start_edit(text)

    def _send_now(self, _message_id: int) -> None:
        async def go():
            await self.bridge.run_queued(self.task_id)
            await self.sync()

        self.bridge.run(go())

    def _discard(self, message_id: int) -> None:
        async def go():
            if await self.bridge.discard_queued(self.task_id, message_id) and not self._closed:
                self.conversation.remove_message(message_id)

        self.bridge.run(go())

    def _on_stop(self) -> None:
        self._show_phase("Stopping…")
        self.bridge.run(self.bridge.stop(self.task_id))

    def _continue(self) -> None:
        self._act(lambda: self.bridge.continue_task(self.task_id))

    def open_workspace(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(self.info.workspace))

    def focus_composer(self) -> None:
        self.composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)

    # -- reading back --

    def turn_text(self, turn_id: str) -> str:
        return self.conversation.turn_text(turn_id)

    def view_state(self) -> tuple:
        anchor, offset = self.conversation.view_state()
        return anchor, offset, self.conversation.expanded_calls()

    def close_panel(self) -> None:
        """Stop observing; the turn goes on."""
        self._closed = True
        if self.observer is not None:
            self.observer.close()
            self.observer.deleteLater()
            self.observer = None
