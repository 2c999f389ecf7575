"""A team's board: its goal and members, the plan's assignments with their states, and the selected assignment's
conversation (live while it runs, replayed when the board opens), with Stop, Retry, Skip and its approval or
question inline.

The board follows the bridge's signals (one completion path, no polling): an event of one of its assignments
re-reads the team after the plan has taken the ended turn in (`bridge.teams.wait_settled`). The selected
assignment's conversation is the task panel's feed, read through an `AssignmentSource`; the turns go on when the
board is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..conversation.feed import ConversationFeed, TurnDetails
from ..conversation.view import ConversationView
from ..conversation.waiting import WaitingBox, swap_box
from ..core.bridge import RuntimeBridge
from ..core.sources import AssignmentSource
from ..widgets import theme
from ..widgets.panel_head import PanelHead

if TYPE_CHECKING:
    from runtime.api import TeamInfo

STATUS_WORDS = {"blocked": "blocked", "ready": "ready", "running": "running", "waiting": "waiting for you",
                "done": "done", "failed": "failed", "interrupted": "interrupted", "skipped": "skipped",
                "aborted": "stopped"}
STATUS_COLORS = {"running": "running", "waiting": "waiting", "failed": "error", "interrupted": "interrupted",
                 "aborted": "interrupted"}
# The header says what the person may do next, in the sidebar badge's terms (team_badge).
TEAM_WORDS = {"running": "working", "waiting": "waiting for you", "error": "an assignment failed",
              "interrupted": "stopped"}
CONTINUABLE = ("ready", "aborted", "interrupted")  # what Run starts or continues


def team_badge(team: TeamInfo) -> str:
    """A team's badge (its sidebar row): working, an assignment waiting for the person, one failed, interrupted or
    stopped, else idle."""
    statuses = {a.status for a in team.assignments}
    for status, badge in (("running", "running"), ("waiting", "waiting"), ("failed", "error"),
                          ("interrupted", "interrupted"), ("aborted", "interrupted")):
        if status in statuses:
            return badge
    return "idle"


def team_word(info: TeamInfo) -> str:
    # Done when every assignment is done or skipped: the rows say so before the plan's own state is written.
    if info.state == "done" or (info.assignments and all(a.status in ("done", "skipped") for a in info.assignments)):
        return "done"
    word = TEAM_WORDS.get(team_badge(info))
    if word is None:
        word = "idle" if any(a.status != "blocked" and a.status != "ready" for a in info.assignments) \
            else "not started"
    return word


def team_color(info: TeamInfo) -> str:
    """The theme colour of the header's word: the sidebar badge's, green when done, grey when idle."""
    return "done" if team_word(info) == "done" else team_badge(info)


class TeamPanel(TurnDetails, QWidget):
    settings_requested = Signal(str)  # the Settings page to show, "" for the first

    def __init__(self, bridge: RuntimeBridge, info: TeamInfo, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.team_id: str = info.id
        self.task_id = info.id  # the owner id the window's signals compare with
        self.info = info
        self.teams = bridge.teams
        self.selected: str | None = None  # the selected assignment's key
        self.feed: ConversationFeed | None = None
        self.waiting: WaitingBox | None = None
        self._closed = False
        self.loaded = asyncio.Event()
        self.setObjectName("TaskPanel")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 14, 24, 14)
        lay.setSpacing(8)
        self.state = QLabel()  # a coloured word, as a tool card's state: nothing about it looks pressable
        self.state.setObjectName("TeamState")
        self.run_button = QPushButton("Run")
        self.run_button.setObjectName("Primary")
        self.run_button.clicked.connect(lambda: self._act(self.teams.run(self.team_id)))
        self.stop_button = QPushButton("Stop team")
        self.stop_button.setToolTip("Stop every running assignment; nothing more starts")
        self.stop_button.clicked.connect(lambda: self._act(self.teams.stop(self.team_id)))
        head = PanelHead(self.state, self.run_button, self.stop_button, framed=False)
        self.title = head.title
        self.title.setWordWrap(True)
        lay.addWidget(head)
        self.members = QLabel()
        self.members.setObjectName("Muted")
        self.members.setWordWrap(True)
        lay.addWidget(self.members)

        split = QSplitter(Qt.Orientation.Vertical)
        self.board = QTreeWidget()
        self.board.setObjectName("TeamBoard")
        self.board.setHeaderLabels(["Assignment", "Member", "State", "Why"])
        self.board.setRootIsDecorated(False)
        self.board.setColumnWidth(0, 300)
        self.board.setColumnWidth(1, 110)
        self.board.setColumnWidth(2, 120)
        self.board.currentItemChanged.connect(self._picked)
        split.addWidget(self.board)
        detail = QWidget()
        dl = QVBoxLayout(detail)
        dl.setContentsMargins(0, 6, 0, 0)
        row = QHBoxLayout()
        self.detail_title = QLabel("Select an assignment to see its work.")
        self.detail_title.setObjectName("TaskTitle")
        row.addWidget(self.detail_title, 1)
        self.buttons: dict[str, QPushButton] = {}
        for label, tip in (("Stop", "Stop this assignment"), ("Retry", "Run it again (a failed or stopped one)"),
                           ("Skip", "Go on without it: its dependents start without its result")):
            button = QPushButton(label)
            button.setToolTip(tip)
            button.clicked.connect(lambda _c=False, name=label: self._assignment_action(name))
            button.hide()
            row.addWidget(button)
            self.buttons[label] = button
        dl.addLayout(row)
        self.waiting_slot = QVBoxLayout()
        dl.addLayout(self.waiting_slot)
        self.conversation = ConversationView(chat=True, retry=False)  # Retry is the board's, for failed ones
        self.conversation.continue_clicked.connect(lambda: self._act(self.teams.run(self.team_id)))
        self.conversation.retry_clicked.connect(lambda: self._assignment_action("Retry"))
        self.conversation.settings_clicked.connect(self.settings_requested)
        self.conversation.details_clicked.connect(self.show_details)
        dl.addWidget(self.conversation, 1)
        split.addWidget(detail)
        split.setSizes([220, 480])
        lay.addWidget(split, 1)
        self._refresh = QTimer(self)
        self._refresh.setSingleShot(True)
        self._refresh.setInterval(50)
        self._refresh.timeout.connect(lambda: self.bridge.run(self.reload()))
        self._show(info)
        theme.notifier.changed.connect(self._retheme)
        self.bridge.run(self._first_load())

    def _retheme(self, _name: str) -> None:
        self._show(self.info)

    # -- reading the team --

    async def _first_load(self) -> None:
        await self.reload()
        first = next((a.key for a in self.info.assignments if a.status in ("running", "waiting", "failed")),
                     self.info.assignments[0].key if self.info.assignments else None)
        if first is not None and not self._closed:
            self.select(first)
        self.loaded.set()

    def owns(self, owner_id: str) -> bool:
        return owner_id == self.team_id or any(a.id == owner_id for a in self.info.assignments)

    def changed(self, owner_id: str, turn_ended: bool = False) -> None:
        """Something of this team changed: read it again (after the plan took in an ended turn)."""
        key = next((a.key for a in self.info.assignments if a.id == owner_id), None)
        if turn_ended and key is not None:
            self.bridge.run(self._after_settle(key))
        self._refresh.start()

    async def _after_settle(self, key: str) -> None:
        await self.teams.wait_assignment(self.team_id, key)
        if not self._closed:
            self._refresh.start()

    async def reload(self) -> None:
        info = await self.teams.get(self.team_id)
        if not self._closed:
            self._show(info)
            if self.feed is not None:
                await self.feed.sync()

    def _show(self, info: TeamInfo) -> None:
        self.info = info
        self.title.setText(info.title)
        self.state.setText(f"● {team_word(info)}")
        self.state.setStyleSheet(f"color: {theme.colors()[team_color(info)]}; font-weight: 600;")
        self.run_button.setText("Continue" if any(a.status in ("interrupted", "aborted") for a in info.assignments)
                                else "Run")
        # Run only when it would start something: a failed assignment needs Retry or Skip first.
        runnable = info.state not in ("running", "done") and any(a.status in CONTINUABLE for a in info.assignments)
        self.run_button.setEnabled(runnable)
        self.run_button.setToolTip("Start the plan, or continue it after a Stop or a crash" if runnable or not any(
            a.status == "failed" for a in info.assignments) else "Retry or skip the failed assignment first")
        self.stop_button.setEnabled(any(a.status == "running" for a in info.assignments))
        self.members.setText("Members: " + "  ·  ".join(
            f"{m.name} ({m.model}{', ' + m.approval if m.approval != 'ask' else ''})" for m in info.members))
        colors = theme.colors()
        items = {item.data(0, Qt.ItemDataRole.UserRole): item for item in self._items()}
        for a in info.assignments:
            item = items.get(a.key)
            if item is None:
                item = QTreeWidgetItem(self.board)
                item.setData(0, Qt.ItemDataRole.UserRole, a.key)
            after = f"  (after {', '.join(a.depends_on)})" if a.depends_on else ""
            item.setText(0, f"{a.key}: {a.instructions.splitlines()[0][:80]}{after}")
            item.setToolTip(0, a.instructions)
            item.setText(1, a.member)
            item.setText(2, STATUS_WORDS.get(a.status, a.status))
            item.setText(3, a.reason or "")
            item.setToolTip(3, a.reason or "")
            color = STATUS_COLORS.get(a.status)
            item.setForeground(2, QColor(colors[color]) if color else QColor(colors["muted"]))
        self._show_selected()

    # -- the selected assignment --

    def select(self, key: str) -> None:
        for item in self._items():
            if item.data(0, Qt.ItemDataRole.UserRole) == key:
                self.board.setCurrentItem(item)
                return

    def _items(self) -> list[QTreeWidgetItem]:
        """The board's rows (one per assignment)."""
        return [item for i in range(self.board.topLevelItemCount()) if (item := self.board.topLevelItem(i))]

    def _picked(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None) -> None:
        key = item.data(0, Qt.ItemDataRole.UserRole) if item is not None else None
        if key == self.selected or key is None:
            return
        self.selected = key
        if self.feed is not None:
            self.feed.close()
        assignment = next(a for a in self.info.assignments if a.key == key)
        self.feed = ConversationFeed(self.bridge, AssignmentSource(self.bridge, self.team_id, assignment),
                                     self.conversation, self)
        self.bridge.run(self.feed.start())
        self._show_selected()

    def _show_selected(self) -> None:
        a = next((a for a in self.info.assignments if a.key == self.selected), None)
        if a is None:
            return
        self.detail_title.setText(f"{a.key} · {a.member} · {STATUS_WORDS.get(a.status, a.status)}")
        self.conversation.set_running(a.status == "running")
        self.detail_title.setToolTip(a.instructions)
        self.buttons["Stop"].setVisible(a.status in ("running", "waiting"))  # Stop also ends a wait
        self.buttons["Retry"].setVisible(a.status in ("failed", "aborted", "interrupted"))
        self.buttons["Skip"].setVisible(a.status not in ("running", "done", "skipped"))
        self.waiting = swap_box(self.waiting_slot, self.waiting, a.pending_request if a.status == "waiting" else None,
                                self._waiting_box)

    def _waiting_box(self, request: dict) -> WaitingBox:
        # A team's approvals are this one call's: no network exception and no "always" rule to offer.
        box = WaitingBox({k: v for k, v in request.items() if k not in ("network_offer", "suggested_rule")})
        if hasattr(box, "always"):
            box.always.hide()
        box.answered.connect(self._answer)
        return box

    def _answer(self, request_id: str, answer: str, _remember: bool, _rule: str = "") -> None:
        if self.selected is None:  # the box belongs to the selected assignment
            return
        self._act(self.teams.answer(self.team_id, self.selected, request_id, answer))

    def _assignment_action(self, name: str) -> None:
        key = self.selected
        if key is None:
            return
        action = {"Stop": self.teams.stop_assignment, "Retry": self.teams.retry, "Skip": self.teams.skip}[name]
        self._act(action(self.team_id, key))

    def _act(self, action: Awaitable[object]) -> None:
        async def go() -> None:
            await action
            await self.reload()

        self.bridge.run(go())

    # -- what the feed calls (the board has no composer) --

    def apply_info(self, _info) -> None:
        pass

    def show_phases(self, _events: list) -> None:
        pass

    def turn_started(self) -> None:
        self._refresh.start()

    def turn_text(self, turn_id: str) -> str:
        return self.conversation.turn_text(turn_id)

    def close_panel(self) -> None:
        """Stop observing; the team goes on."""
        self._closed = True
        self._refresh.stop()
        if self.feed is not None:
            self.feed.close()
