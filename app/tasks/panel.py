"""A task panel: header with the task's fixed settings and its command settings, the windowed conversation, the
setup phase of a starting turn, what the task does between turns (its wake-up and background commands:
activity.py), the inline waiting UI and the composer.

The panel is an observer (runtime/ARCHITECTURE.md, "StreamBuffer and subscriptions"). It opens at the task's
last page of messages, then follows the task with one subscription across all its turns; it is thrown away on
close and the turns do not notice. Reads are incremental: a new turn reads the messages after the newest one the
panel knows, a finished turn re-reads its own message — nothing re-reads or re-lays out the whole conversation.

Events of a turn go to that turn's live `Message` (and its item when rendered). A turn whose message the panel
has not read yet keeps its events aside until it has; a turn whose message was already final when read is
ignored (its events are a replay of what the message holds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ..conversation.bottom import PanelBottom
from ..conversation.changes_dialog import ChangesDialog
from ..conversation.feed import ConversationFeed, FeedPanel
from ..conversation.view import ConversationView
from ..conversation.waiting import WaitingBox, swap_box
from ..core.bridge import RuntimeBridge, TaskObserver
from ..core.sources import TaskSource
from ..widgets import dialogs
from ..widgets.model_picker import ModelDialog
from ..widgets.panel_head import PanelHead
from .activity import ActivityBox
from .commands import CommandSettings
from .deliverables import TOOL, DeliverablesDialog, label
from .todos import TodoBox

if TYPE_CHECKING:
    from runtime.api import TaskInfo

    from ..core.bridge import Batched

APPROVAL_LABELS = {
    "ask": "Asks before changes",
    "auto_edit": "Edits files, asks before commands",
    "full_auto": "Runs everything without asking",
}


class TaskPanel(FeedPanel, QWidget):
    title_changed = Signal(str)
    settings_requested = Signal(str)  # the Settings page to show, "" for the first
    task_forked = Signal(str)  # the new task's id

    def __init__(self, bridge: RuntimeBridge, info: TaskInfo, enter_sends: bool = True, view_state: tuple | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id: str = info.id
        self.info = info
        self.waiting: WaitingBox | None = None
        self._closed = False

        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.setObjectName("TaskPanel")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        folder = QPushButton("Open folder")
        folder.setToolTip("Open this task's workspace folder")
        folder.clicked.connect(self.open_workspace)
        self.deliverables = QPushButton()
        self.deliverables.setToolTip("What this task delivered: open or save it, and its older versions")
        self.deliverables.clicked.connect(self.show_deliverables)
        self.deliverables.hide()  # until the task delivers something
        self.deliverables_dialog: DeliverablesDialog | None = None
        self.head = PanelHead(self.deliverables, folder)
        self.title = self.head.title
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
        self.commands = CommandSettings(bridge, info)
        chips.addWidget(self.commands)
        chips.addStretch(1)
        self.head.rows.addLayout(chips)
        lay.addWidget(self.head)

        self.conversation = ConversationView()
        self.conversation.continue_clicked.connect(self._continue)
        self.conversation.send_now_clicked.connect(self._send_now)
        self.conversation.discard_clicked.connect(self._discard)
        self.conversation.retry_clicked.connect(self._retry)
        self.conversation.settings_clicked.connect(self.settings_requested)
        self.conversation.fork_clicked.connect(self.choose_other_model)
        self.conversation.details_clicked.connect(self.show_details)
        self.conversation.changes_clicked.connect(self.show_changes)
        self.changes_dialog: ChangesDialog | None = None
        self.conversation.edit_clicked.connect(self._start_edit)
        lay.addWidget(self.conversation, 1)

        self.todo_box = TodoBox()
        self.activity = ActivityBox(bridge, self.task_id)
        bottom = PanelBottom(enter_sends, self.activity, self.todo_box)
        self.phase, self.waiting_slot, self.composer = bottom.phase, bottom.waiting_slot, bottom.composer
        if bridge.remote:  # what only this computer's tasks have (README, "A Hearth server in the window")
            for control in (folder, other, self.commands):
                control.hide()
            self.conversation.follow_ups = False
            self.composer.without_files()
            self.head.rows.addWidget(self._server_note())
            bridge.connection.connect(self._connection)
        self.composer.submitted.connect(self._on_submit)
        self.composer.stop_requested.connect(self._on_stop)
        lay.addWidget(bottom)
        self._set_title(info)
        self.feed = ConversationFeed(bridge, TaskSource(bridge, self.task_id), self.conversation, self, view_state)
        self.bridge.run(self.feed.start())

    def _server_note(self) -> QLabel:
        note = QLabel(f"This task lives on the Hearth {self.bridge.where} and runs there. Its folder, "
                      "deliverables, changes and background commands are there too; attachments, Continue, Retry "
                      "and Edit work on this computer's tasks only.")
        note.setObjectName("Muted")
        note.setWordWrap(True)
        return note

    def _connection(self, state: str) -> None:
        """The server went away mid-turn: say so where the turn's progress shows; its next events say the rest."""
        if state == "reconnecting" and self.composer.running and not self._closed:
            self.phase.say("The server does not answer: reconnecting…")

    def show_changes(self, turn_id: str) -> None:
        """The files an answer's turn changed, with their diffs and its Undo."""

        async def go() -> None:
            turns = await self.bridge.changes.list(self.task_id)
            turn = next((t for t in turns if t.turn_id == turn_id), None)
            if turn is not None and not self._closed:
                self.changes_dialog = ChangesDialog(self.bridge, self.task_id, turn, self)
                self.changes_dialog.show()

        self.bridge.run(go(), owner=self)

    # -- what the feed reads and follows --

    @property
    def observer(self) -> TaskObserver | None:
        return self.feed.observer

    def turn_started(self) -> None:
        self.composer.set_running(True)
        self.conversation.set_running(True)
        self.waiting = swap_box(self.waiting_slot, self.waiting, None, self._waiting_box)

    def apply_info(self, info: TaskInfo) -> None:
        self.info = info
        self.todo_box.set_todos(info.todos)
        if not self.bridge.remote:  # a server's wake-ups and background commands are its own
            self.activity.show_wake(info)
            self.bridge.run(self.activity.refresh(), owner=self)
        self._set_title(info)
        self.commands.show_info(info)
        running = self.bridge.is_running(self.task_id)
        pending = info.pending_request if info.state == "waiting" and not running else None
        self.composer.set_running(running, waiting=pending is not None)
        self.conversation.set_running(running)
        self.waiting = swap_box(self.waiting_slot, self.waiting, pending, self._waiting_box)
        self.conversation.mark_waiting(pending.get("call_id") if pending else None)
        if not running:
            self.phase.hide()
        if not self.bridge.remote:
            self.bridge.run(self._count_deliverables(), self)

    # -- deliverables --

    async def _count_deliverables(self) -> None:
        count = await self.bridge.deliveries.count(self.task_id)
        if self._closed:
            return
        changed = self.deliverables.text() != label(count)
        self.deliverables.setText(label(count))
        self.deliverables.setVisible(count > 0)
        if changed and self.deliverables_dialog is not None:
            await self.deliverables_dialog.load()

    def show_deliverables(self) -> DeliverablesDialog:
        dlg = self.deliverables_dialog
        if dlg is None:
            dlg = self.deliverables_dialog = DeliverablesDialog(self.bridge, self.task_id, self.head.title.text(), self)
            dlg.destroyed.connect(lambda: setattr(self, "deliverables_dialog", None))
            self.bridge.run(dlg.load(), dlg)
        dlg.show()
        dlg.raise_()
        return dlg

    def _set_title(self, info: TaskInfo) -> None:
        title = info.title or "New task"
        if self.head.show_title(title):
            self.title_changed.emit(title)

    def show_phases(self, events: list[Batched]) -> None:
        for ev in events:
            if ev.type == "reasoning_delta":
                self.phase.say("Thinking…")
            elif ev.type == "todos":
                self.todo_box.set_todos(ev.todos)
            else:
                self.phase.follow(ev)
            delivered = ev.type == "tool_call" and ev.name == TOOL and ev.state == "done"
            if delivered and not self.bridge.remote:  # count it at once (a server's deliverables stay there)
                self.bridge.run(self._count_deliverables(), self)

    # -- waiting --

    def _waiting_box(self, request: dict) -> WaitingBox:
        # Accepting unsandboxed commands only changes anything where they would otherwise ask: full_auto.
        # A server's task's command settings are the server's.
        box = WaitingBox(request, offer_unsandboxed=self.info.approval == "full_auto" and not self.bridge.remote)
        box.answered.connect(self._on_answer)
        box.unsandboxed_accepted.connect(self._accept_unsandboxed)
        box.plan_answered.connect(self._on_plan)
        return box

    def _on_plan(self, request_id: str, answer: str, steps: list) -> None:
        self._on_answer(request_id, answer, False, "", steps or None)

    def _accept_unsandboxed(self, request_id: str) -> None:
        self._on_answer(request_id, "approve", False, accept_unsandboxed=True)

    def _on_answer(self, request_id: str, answer: str, remember: bool, rule: str = "",
                   plan: list | None = None, accept_unsandboxed: bool = False) -> None:
        async def answer_it() -> None:
            if accept_unsandboxed:  # stored first, so the turn the approval starts already has it
                await self.bridge.set_task_sandbox(self.task_id, unsandboxed_ok=True)
            await self.bridge.answer(self.task_id, request_id, answer, remember, plan, rule or None)

        self._act(answer_it, on_error=self._reenable_waiting)

    # -- actions --

    def _on_submit(self, text: str, files: list[str]) -> None:
        if self.composer.is_editing:
            self.composer.editing.hide()
            self.composer.attach.setEnabled(True)
            self._act(lambda: self.bridge.edit_last(self.task_id, text),
                      on_error=lambda: self.composer.start_edit(text))
            return
        self.send_or_queue(lambda queue: self.bridge.send(self.task_id, text, files, queue=queue),
                           self.bridge.is_running(self.task_id), text, files)

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
        async def go() -> None:
            info = await self.bridge.fork_task(self.task_id, model)
            self.task_forked.emit(info.id)

        self.bridge.run(go())

    def _start_edit(self, _message_id: int, text: str) -> None:
        self.composer.start_edit(text)

    def _send_now(self, _message_id: int) -> None:
        self._act(lambda: self.bridge.run_queued(self.task_id))

    def _discard(self, message_id: int) -> None:
        async def go() -> None:
            if await self.bridge.discard_queued(self.task_id, message_id) and not self._closed:
                self.conversation.remove_message(message_id)

        self.bridge.run(go())

    def _on_stop(self) -> None:
        self.phase.say("Stopping…")
        self.bridge.run(self.bridge.stop(self.task_id))

    def _continue(self) -> None:
        self._act(lambda: self.bridge.continue_task(self.task_id))

    def open_workspace(self) -> None:
        dialogs.open_path(self.window(), self.info.workspace)

    def close_panel(self) -> None:
        """Stop observing; the turn goes on."""
        self._closed = True
        if self.bridge.remote:
            self.bridge.connection.disconnect(self._connection)
        self.feed.close()
