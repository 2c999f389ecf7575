"""The scrolling conversation of one task, windowed: only a page or a few of messages exist as widgets.

A task of 2,000 messages opens at its last page (`PAGE` messages, read as a page from the runtime) and shows it
at once. Scrolling near the top asks for the page before (`older_wanted`), near the bottom of a window that is not
the newest for the page after (`newer_wanted`); the panel reads them and hands them over. At most `MAX_ITEMS`
messages stay rendered: beyond that the far end is dropped (and read again if the person goes back there), so the
widgets, memory and layout passes follow what is on screen, never the length of the task. This is the "sliding
window of real widgets" chat apps use: text stays selectable and copyable, tool cards and banners stay ordinary
widgets, and nothing is painted by hand. (A model/delegate view would make selection and the cards' buttons
custom code; measured here, a window of real widgets paints a 2,000-message task's last page in ~0.1 s.)

The view only shows `Message`s; the panel owns them. A live message's events reach its item through
`live_item()`; the panel keeps applying them to the `Message` while the item is not rendered.
"""

from __future__ import annotations

from functools import partial

from PySide6.QtCore import QPoint, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QResizeEvent
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from .message_item import MARKERS, AssistantItem, Message
from .message_widgets import Banner, EventLine, UserBubble
from .tool_card import ToolCard

PAGE = 20  # messages read at a time: more than a tall window shows, few enough to paint at once
MAX_ITEMS = 90  # messages kept rendered
EDGE = 400  # pixels from an end of the window at which the next page is asked for


class ConversationView(QScrollArea):
    continue_clicked = Signal()
    retry_clicked = Signal()
    settings_clicked = Signal(str)  # the Settings page to show, "" for the first
    fork_clicked = Signal()
    details_clicked = Signal(str)  # turn id
    changes_clicked = Signal(str)  # turn id: the files it changed (a task's answer)
    edit_clicked = Signal(int, str)  # message id, its text
    older_wanted = Signal()
    newer_wanted = Signal()
    latest_wanted = Signal()
    start_wanted = Signal()  # the first page: the conversation's first messages
    send_now_clicked = Signal(int)
    discard_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, chat: bool = False, retry: bool = True):
        super().__init__(parent)
        self.chat = chat  # a chat's conversation: model-change lines, no edit of the last input
        self.offers_retry = retry  # answers offer Retry (a team's board offers it per assignment instead)
        # Continue, Retry, Edit, Send now and Discard: a server's task offers none of them (TaskPanel turns it off).
        self.follow_ups = True
        self.setObjectName("Conversation")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = self.body = QWidget()
        body.setObjectName("ConversationBody")
        self.lay = QVBoxLayout(body)
        self.lay.setContentsMargins(24, 16, 24, 16)
        self.lay.setSpacing(14)
        self.older_note = QLabel("Loading earlier messages…")
        self.older_note.setObjectName("Muted")
        self.older_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.older_note.hide()
        self.lay.addWidget(self.older_note)
        self.lay.addStretch(1)
        self.hint = QLabel()  # what to do in an empty conversation (set_hint), in the middle of the view
        self.hint.setObjectName("Muted")
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.hint.setWordWrap(True)
        self.hint.hide()
        self.lay.addWidget(self.hint)
        self.lay.addStretch(1)
        self.setWidget(body)
        self.messages: list[Message] = []
        self.items: dict[int, QWidget] = {}
        self.has_older = False
        self.has_newer = False
        self.can_continue_id: int | None = None
        self.running = False
        self.waiting_call: str | None = None  # the call whose approval or question waits for the person
        self._stick = True
        self._asked = False  # a page was asked for and has not arrived yet
        self._positioning = False  # scroll moves made by the view itself never ask for pages
        self._pin: tuple[int, int] | None = None  # (message id, offset) held in place while heights settle
        self.jump = QPushButton("↓ Jump to latest", self.viewport())
        self.jump.setObjectName("Primary")
        self.jump.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump.clicked.connect(self.jump_to_latest)
        self.jump.hide()
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range)
        bar.valueChanged.connect(self._on_scroll)

    # -- content --

    def show_page(self, messages: list[Message], has_older: bool, has_newer: bool, at_top: bool = False) -> None:
        """Replace the window with `messages` (the newest page, or the first one when `at_top`)."""
        for mid in list(self.items):
            self._drop(mid)
        self.messages = list(messages)
        self.has_older, self.has_newer = has_older, has_newer
        for i, m in enumerate(self.messages):
            self._insert(i, m)
        self._asked = False
        self._stick = not at_top and not has_newer
        self._refresh_meta()
        self._settle()
        bar = self.verticalScrollBar()
        bar.setValue(bar.minimum() if at_top else bar.maximum())
        self._update_jump()

    def add_older(self, messages: list[Message], has_older: bool) -> None:
        """Prepend the page before the window, keeping what the person looks at in place."""
        anchor, offset = self._anchor()
        known = {m.id for m in self.messages}
        fresh = [m for m in messages if m.id not in known]
        self.messages[:0] = fresh
        for i, m in enumerate(fresh):
            self._insert(i, m)
        self.has_older = has_older
        self._asked = False
        if len(self.messages) > MAX_ITEMS:  # drop the newest end, away from the person
            for m in self.messages[MAX_ITEMS:]:
                self._drop(m.id)
            del self.messages[MAX_ITEMS:]
            self.has_newer = True
            self._stick = False
        self._refresh_meta()
        self._settle()
        self._restore_anchor(anchor, offset)
        self._update_jump()

    def add_newer(self, messages: list[Message], has_newer: bool) -> None:
        """Append messages after the window (the next page, or new messages of this task)."""
        known = {m.id for m in self.messages}
        fresh = [m for m in messages if m.id not in known]
        anchor, offset = self._anchor()
        for m in fresh:
            self.messages.append(m)
            self._insert(len(self.messages) - 1, m)
        self.has_newer = has_newer
        self._asked = False
        if len(self.messages) > MAX_ITEMS:  # drop the oldest end
            cut = len(self.messages) - MAX_ITEMS
            for m in self.messages[:cut]:
                self._drop(m.id)
            del self.messages[:cut]
            self.has_older = True
        self._refresh_meta()
        self._settle()
        if not self._stick:
            self._restore_anchor(anchor, offset)
        self._update_jump(arrived=bool(fresh))

    def update_message(self, message: Message) -> None:
        """A message changed as a whole (its turn ended, it was sent from the queue): re-render its item."""
        index = next((i for i, m in enumerate(self.messages) if m.id == message.id), None)
        if index is None:
            return
        self.messages[index] = message
        self._drop(message.id)
        self._insert(index, message)
        self._refresh_meta()

    def remove_message(self, message_id: int) -> None:
        self.messages = [m for m in self.messages if m.id != message_id]
        self._drop(message_id)
        self._show_hint()

    def set_hint(self, text: str) -> None:
        """Shown while the conversation has no message: what to do first."""
        self.hint.setText(text)
        self._show_hint()

    def _show_hint(self) -> None:
        self.hint.setVisible(bool(self.hint.text()) and not self.messages and not self.has_older)

    def set_running(self, running: bool) -> None:
        if running != self.running:
            self.running = running
            last_input = self._last_input()
            for m in list(self.messages):
                if m.status == "queued" or m.id == last_input:  # their buttons depend on it
                    self.update_message(m)
            self._refresh_meta()

    def _insert(self, index: int, m: Message) -> None:
        if m.role == "user" and m.rewind:
            item = QWidget()  # "Continue" and "Retry" are not bubbles: the answer says "continued"
            item.setFixedHeight(0)
            item.setVisible(False)  # hidden, so the layout adds no spacing for it either
        elif m.role == "event":
            item = EventLine(m.parts)
        elif m.role == "user":
            editable = m.id == self._last_input() and not self.running and not self.chat and self.follow_ups
            item = UserBubble(m.parts, m.status, stranded=m.status == "queued" and not self.running and self.follow_ups,
                              editable=editable)
            item.send_now.connect(lambda mid=m.id: self.send_now_clicked.emit(mid))
            item.discard.connect(lambda mid=m.id: self.discard_clicked.emit(mid))
            item.edit.connect(lambda mid=m.id, text=m.text: self.edit_clicked.emit(mid, text))
        else:
            before = self.messages[index - 1] if index > 0 else None
            marker = MARKERS[before.rewind] if before is not None and before.role == "user" and before.rewind else ""
            item = AssistantItem(m, marker, partial(self._card_before, m.id), chat=self.chat, retry=self.offers_retry)
            item.continue_clicked.connect(self.continue_clicked)
            item.retry_clicked.connect(self.retry_clicked)
            item.settings_clicked.connect(self.settings_clicked)
            item.fork_clicked.connect(self.fork_clicked)
            item.details_clicked.connect(self.details_clicked)
            item.changes_clicked.connect(self.changes_clicked)
        self.items[m.id] = item
        self.lay.insertWidget(index + 1, item)  # after the "loading earlier" note
        if not (m.role == "user" and m.rewind):
            item.show()  # now, not on Qt's queued show: the layout must count it before scroll positions are set

    def _last_input(self) -> int | None:
        return next((m.id for m in reversed(self.messages) if m.role == "user" and not m.rewind
                     and m.status == "complete" and m.text and not m.woken), None)

    def _card_before(self, message_id: int, call_id: str) -> ToolCard | None:
        """The card an earlier message shows for `call_id` (an approval or question answered in a later turn
        completes its call there: one card per call, updated in place)."""
        for m in self.messages:
            if m.id >= message_id:
                return None
            item = self.items.get(m.id)
            if isinstance(item, AssistantItem):
                card = item.block.card(call_id)
                if card is not None:
                    return card
        return None

    def _drop(self, message_id: int) -> None:
        item = self.items.pop(message_id, None)
        if item is not None:
            self.lay.removeWidget(item)
            item.hide()
            item.deleteLater()

    def _refresh_meta(self) -> None:
        self._show_hint()
        last = next((m.id for m in reversed(self.messages) if m.role == "assistant"), None)
        self.can_continue_id = last if not self.has_newer and self.follow_ups else None
        self._link_continued()
        for m in self.messages:
            item = self.items.get(m.id)
            if isinstance(item, AssistantItem):
                item.show_meta(m.id == self.can_continue_id and not self.running,
                               m.id == last and self.waiting_call is not None, self.waiting_call)

    def _link_continued(self) -> None:
        """Join each answer a Continue carried on to the answer before it (answer, Continue, answer). The part
        before keeps its own footer until the rest has text (a Continue that failed at once shows both)."""
        items = [self.items.get(m.id) for m in self.messages]
        for item in items:
            if isinstance(item, AssistantItem):
                item.goes_on = False
        for i, item in enumerate(items):
            if isinstance(item, AssistantItem):
                before = items[i - 2] if i >= 2 else None
                if isinstance(before, AssistantItem) and self.messages[i - 1].rewind == "continue":
                    item.earlier = before
                    if self.messages[i].text:
                        before.goes_on = True
                else:
                    item.earlier = None

    # -- live --

    def live_item(self, turn_id: str) -> AssistantItem | None:
        m = next((m for m in self.messages if m.role == "assistant" and m.turn_id == turn_id), None)
        item = self.items.get(m.id) if m is not None else None
        return item if isinstance(item, AssistantItem) else None

    def mark_waiting(self, call_id: str | None) -> None:
        """Show which card the pending approval or question belongs to."""
        self.waiting_call = call_id
        self._refresh_meta()

    # -- reading back (tests, export, view state) --

    def turn_entry(self, turn_id: str) -> AssistantItem | None:
        """The rendered answer of a turn, if it is in the window."""
        return self.live_item(turn_id)

    def turn_text(self, turn_id: str) -> str:
        item = self.live_item(turn_id)
        return item.block.text() if item is not None else ""

    def assistant_items(self) -> list[AssistantItem]:
        return [w for w in self.items.values() if isinstance(w, AssistantItem)]

    def cards(self) -> list:
        return [c for m in self.messages if isinstance(w := self.items.get(m.id), AssistantItem)
                for c in w.block.cards()]

    def banners(self) -> list[Banner]:
        return [w.banner for w in self.assistant_items() if w.banner is not None]

    def expanded_calls(self) -> set[str]:
        return {c.call_id for c in self.cards() if c.expanded}

    def expand_calls(self, call_ids: set[str]) -> None:
        for card in self.cards():
            if card.call_id in call_ids:
                card.toggle.setChecked(True)

    def view_state(self) -> tuple[int | None, int]:
        """(message id at the top of the viewport, its offset) — to come back to the same place."""
        if self._stick and not self.has_newer:
            return None, 0
        return self._anchor()

    def restore_view(self, anchor: int | None, offset: int) -> None:
        if anchor is not None and anchor in self.items:
            self._stick = False
            self._settle()
            self._restore_anchor(anchor, offset)
            self._update_jump()

    # -- scrolling --

    def _settle(self) -> None:
        """Lay out now, so heights are known before scroll positions are computed: the scroll area would
        otherwise resize its body (and so its scroll range) only on its next event pass."""
        self._positioning = True
        QTimer.singleShot(0, self._positioned)
        for _ in range(3):
            self.lay.activate()
            height = max(self.lay.sizeHint().height(), self.viewport().height())
            if self.body.height() != height:
                self.body.resize(self.viewport().width(), height)

    def _positioned(self) -> None:
        """After the view moved itself: from here on scrolling is the person's; an edge reached asks for more."""
        self._positioning = False
        pin = self._pin
        self._on_scroll(self.verticalScrollBar().value())
        self._pin = pin

    def _anchor(self) -> tuple[int | None, int]:
        top = self.verticalScrollBar().value()
        for m in self.messages:
            item = self.items.get(m.id)
            if item is not None and not item.isHidden() and item.geometry().bottom() >= top:
                return m.id, item.geometry().top() - top
        return None, 0

    def _restore_anchor(self, anchor: int | None, offset: int) -> None:
        """Put message `anchor` at `offset` from the top, and keep it there while the heights of the items
        around it settle (text lays out after it is shown), until the person scrolls."""
        if anchor is None or (item := self.items.get(anchor)) is None:
            self._pin = None
            return
        self._pin = (anchor, offset)
        positioning, self._positioning = self._positioning, True
        try:
            self.verticalScrollBar().setValue(item.geometry().top() - offset)
        finally:
            self._positioning = positioning

    def _on_scroll(self, value: int) -> None:
        if self._positioning:
            return
        self._pin = None
        bar = self.verticalScrollBar()
        self._stick = value >= bar.maximum() - 40 and not self.has_newer
        if not self._asked and self.messages:
            if self.has_older and value <= EDGE:
                self._asked = True
                self.older_note.show()
                QTimer.singleShot(0, self.older_wanted.emit)
            elif self.has_newer and value >= bar.maximum() - EDGE:
                self._asked = True
                QTimer.singleShot(0, self.newer_wanted.emit)
        if self._stick:
            self.jump.hide()

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._pin is not None:
            self._restore_anchor(*self._pin)
        elif self._stick:
            self.verticalScrollBar().setValue(hi)
        if not self.has_older:
            self.older_note.hide()

    def page_failed(self) -> None:
        self._asked = False
        self.older_note.hide()

    def _update_jump(self, arrived: bool = False) -> None:
        show = not self._stick and (self.has_newer or arrived or self.jump.isVisible())
        if show:
            vp = self.viewport()
            self.jump.adjustSize()
            self.jump.move(QPoint(vp.width() - self.jump.width() - 16, vp.height() - self.jump.height() - 12))
            self.jump.raise_()
        self.jump.setVisible(show)

    def note_live_activity(self) -> None:
        """Something new arrived at the end: offer the way there when the person reads further up."""
        if not self._stick:
            self._update_jump(arrived=True)

    def jump_to_latest(self) -> None:
        self.jump.hide()
        if self.has_newer:
            self.latest_wanted.emit()
        else:
            self._stick = True
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())

    def jump_to_start(self) -> None:
        """To the conversation's first message: its first page when older ones are not loaded (a long task
        would otherwise take a page load per screen of scrolling up)."""
        if self.has_older:
            self.start_wanted.emit()
        else:
            self._stick = False
            bar = self.verticalScrollBar()
            bar.setValue(bar.minimum())
            self._update_jump(arrived=bool(self.messages))

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Home and End (with or without Ctrl) go to the first and the latest message."""
        key = event.key()
        if key == Qt.Key.Key_Home:
            self.jump_to_start()
        elif key == Qt.Key.Key_End:
            self.jump_to_latest()
        else:
            super().keyPressEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.jump.isVisible():
            self._update_jump()
