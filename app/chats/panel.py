"""A chat panel: a quick conversation beside the tasks, lighter than a task panel.

No folder, approval or planning chips (a chat has no workspace, and its one tool that changes something, the
memory, asks: an approval box above the composer, Approve or Deny); the model is a button, because a chat's model
may change between answers (a line in the conversation marks where). "Turn into a
task" starts a task whose history is this chat. The conversation itself is the task panel's: the same feed
(paging, replay of a running answer, live events), read through a `ChatSource`; the turn goes on when the panel
is closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QPushButton, QVBoxLayout, QWidget

from ..conversation.bottom import PanelBottom
from ..conversation.feed import ConversationFeed, FeedPanel
from ..conversation.view import ConversationView
from ..conversation.waiting import WaitingBox, swap_box
from ..core.bridge import RuntimeBridge
from ..core.sources import ChatSource
from ..widgets.model_picker import ModelDialog
from ..widgets.panel_head import PanelHead

if TYPE_CHECKING:
    from runtime.api import ChatInfo

    from ..core.bridge import Batched

EMPTY_HINT = ("Type a question below to start.\n\nA chat is a quick conversation with the model shown above "
              "(click it to pick another). For work on files or commands, use Turn into a task.")


class ChatPanel(FeedPanel, QWidget):
    title_changed = Signal(str)
    settings_requested = Signal(str)  # the Settings page to show, "" for the first
    became_task = Signal(str)  # the new task's id

    def __init__(self, bridge: RuntimeBridge, info: ChatInfo, enter_sends: bool = True, view_state: tuple | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id: str = info.id  # the owner id the window and the bridge's signals use
        self.chat_id: str = info.id
        self.info = info
        self.source = ChatSource(bridge, info.id)
        self._closed = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.setObjectName("TaskPanel")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.model_button = QPushButton()
        self.model_button.setObjectName("Link")
        self.model_button.setToolTip("The model of the next answers: change it at any time")
        self.model_button.clicked.connect(self.choose_model)
        to_task = QPushButton("Turn into a task")
        to_task.setToolTip("Start a task (with a workspace and tools) whose history is this chat")
        to_task.clicked.connect(self.turn_into_task)
        self.head = PanelHead(self.model_button, to_task, top_margin=12)
        self.title = self.head.title
        lay.addWidget(self.head)

        self.conversation = ConversationView(chat=True)
        self.conversation.continue_clicked.connect(lambda: self._act(self.source.continue_chat))
        self.conversation.retry_clicked.connect(lambda: self._act(self.source.retry))
        self.conversation.send_now_clicked.connect(lambda _mid: self._act(self.source.run_queued))
        self.conversation.discard_clicked.connect(self._discard)
        self.conversation.settings_clicked.connect(self.settings_requested)
        self.conversation.details_clicked.connect(self.show_details)
        self.conversation.fork_clicked.connect(self.choose_model)
        lay.addWidget(self.conversation, 1)

        bottom = PanelBottom(enter_sends)
        self.phase, self.waiting_slot, self.composer = bottom.phase, bottom.waiting_slot, bottom.composer
        self.waiting: WaitingBox | None = None
        self.composer.without_files()
        self.composer.submitted.connect(self._on_submit)
        self.composer.stop_requested.connect(self.stop)
        lay.addWidget(bottom)
        self._show_info(info)
        self.feed = ConversationFeed(bridge, self.source, self.conversation, self, view_state)
        self.bridge.run(self.feed.start())

    # -- what the feed calls --

    def turn_started(self) -> None:
        self.composer.set_running(True)
        self.conversation.set_running(True)
        self.waiting = swap_box(self.waiting_slot, self.waiting, None, self._waiting_box)

    def apply_info(self, info: ChatInfo) -> None:
        self.info = info
        self.conversation.set_hint(EMPTY_HINT)  # once the first page is read: an empty chat never flashes it
        self._show_info(info)
        running = self.source.is_running()
        self.composer.set_running(running, waiting=info.state == "waiting")
        self.conversation.set_running(running)
        pending = info.pending_request if info.state == "waiting" and not running else None
        self.waiting = swap_box(self.waiting_slot, self.waiting, pending, self._waiting_box)
        self.conversation.mark_waiting(pending.get("call_id") if pending else None)
        if not running:
            self.phase.hide()

    def _waiting_box(self, request: dict) -> WaitingBox:
        """Approve or Deny one memory write: a chat has no rules of its own to remember the answer in."""
        box = WaitingBox(request)
        box.always.hide()
        box.answered.connect(self._on_answer)
        return box

    def _on_answer(self, request_id: str, answer: str, _remember: bool, _rule: str = "") -> None:
        self._act(lambda: self.source.answer(request_id, answer), on_error=self._reenable_waiting)

    def show_phases(self, events: list[Batched]) -> None:
        for ev in events:
            self.phase.follow(ev)

    def _show_info(self, info: ChatInfo) -> None:
        title = info.title or "New chat"
        if self.head.show_title(title):
            self.title_changed.emit(title)
        self.model_button.setText(f"{info.model} ▾")

    # -- actions --

    def _on_submit(self, text: str, _files: list[str]) -> None:
        self.send_or_queue(lambda queue: self.source.send(text, queue=queue), self.source.is_running(), text, [])

    def _discard(self, message_id: int) -> None:
        async def go() -> None:
            if await self.source.discard_queued(message_id) and not self._closed:
                self.conversation.remove_message(message_id)

        self.bridge.run(go())

    def choose_model(self) -> ModelDialog:
        dlg = ModelDialog(self.bridge, self.info.model, self, chat=True)
        dlg.chosen.connect(lambda model: self._act(lambda: self.source.set_model(model)))
        dlg.show()
        self.model_dialog = dlg
        return dlg

    def turn_into_task(self) -> None:
        async def go() -> None:
            info = await self.source.to_task()
            self.became_task.emit(info.id)

        self.bridge.run(go())

    def stop(self) -> None:
        self.phase.say("Stopping…")
        self.bridge.run(self.source.stop())

    def close_panel(self) -> None:
        """Stop observing; the answer goes on."""
        self._closed = True
        self.feed.close()
