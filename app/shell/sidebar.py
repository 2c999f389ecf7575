"""The sidebar: Tasks, Chats and Teams (three tabs), one row per task, chat or team with its title, a live state
badge and the last activity; rows that share a title also show when each began (a task continued with another
model keeps its title).

A model/view list: rows are painted by a delegate, not built from widgets, so 1,000 tasks cost what the ~15
visible rows cost."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

from PySide6.QtCore import (
    QAbstractListModel,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QSize,
    Qt,
    QTimer,
    Signal,
    SignalInstance,
)
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListView,
    QMenu,
    QPushButton,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTabBar,
    QVBoxLayout,
    QWidget,
)

from runtime.events import STATE_WORDS, state_key

from ..core.util import ago
from ..teams.panel import team_badge
from ..widgets import theme
from ..widgets.icons import app_icon

if TYPE_CHECKING:
    from runtime.api import ChatInfo, TaskInfo, TeamInfo

    Row: TypeAlias = TaskInfo | ChatInfo | TeamInfo  # a row of one of the three lists

TASK_ID = Qt.ItemDataRole.UserRole
BADGE = Qt.ItemDataRole.UserRole + 1
UPDATED = Qt.ItemDataRole.UserRole + 2
WAKE = Qt.ItemDataRole.UserRole + 3  # when an idle task wakes by itself ("wakes 14:20"), or None
ROW_HEIGHT = 52
BADGE_TEXT = STATE_WORDS  # the same words as `hearth tasks`


MODES = ("tasks", "chats", "teams")


def created_text(ts: float, seconds: bool = False) -> str:
    """When a row began, short ("2 Dec 14:02", or "2 Dec 14:02:37"), for rows whose titles are the same."""
    t = time.localtime(ts)
    return f"{t.tm_mday} {time.strftime('%b %H:%M:%S' if seconds else '%b %H:%M', t)}"


def started_labels(tasks: Sequence[Row], untitled: str) -> dict[str, str]:
    """Rows that share a title, by id: when each began, to the second where the minute is not enough, numbered
    where even that is not."""
    groups: dict[str, list[Row]] = defaultdict(list)
    for t in tasks:
        groups[t.title or untitled].append(t)
    labels = {}
    for group in (g for g in groups.values() if len(g) > 1):
        minutes = [created_text(t.created_at) for t in group]
        exact = len(set(minutes)) < len(minutes)
        texts = [created_text(t.created_at, seconds=exact) for t in group]
        seen: dict[str, int] = defaultdict(int)
        for t, text in sorted(zip(group, texts, strict=True), key=lambda pair: pair[0].created_at):
            seen[text] += 1  # begun within the same second: numbered in the order they began
            labels[t.id] = text if texts.count(text) == 1 else f"{text} ({seen[text]})"
    return labels


def badge_for(info: TaskInfo | ChatInfo, running: bool) -> str:
    return state_key(info.state, info.last_reason, running)


class TaskListModel(QAbstractListModel):
    """The tasks as rows (title, badge, last activity). Cost follows the rows on screen: the view asks only
    for those, and the delegate paints them; there is no widget per row."""

    def __init__(self, parent: QObject | None = None, untitled: str = "New task"):
        super().__init__(parent)
        self.untitled = untitled
        self.tasks: list[Row] = []
        self.badges: dict[str, str] = {}
        self.index_of: dict[str, int] = {}
        self.started: dict[str, str] = {}  # rows whose title another row has too: when each began

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008 - Qt's own
        return 0 if parent.isValid() else len(self.tasks)

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        info = self.tasks[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:  # rows of the same title are told apart by when they began
            title = info.title or self.untitled
            started = self.started.get(info.id)
            return f"{title} · {started}" if started else title
        if role == Qt.ItemDataRole.ToolTipRole:
            started = time.strftime("%A %d %B %Y, %H:%M", time.localtime(info.created_at))
            return f"{info.title or self.untitled}\nStarted {started}"
        if role == TASK_ID:
            return info.id
        if role == BADGE:
            return self.badges.get(info.id, "idle")
        if role == UPDATED:
            return info.updated_at
        if role == WAKE:
            wakes = getattr(info, "wakes", None)  # a task's (chats and teams wake by nobody)
            return wakes() if wakes is not None else None
        return None

    def set_tasks(self, tasks: Sequence[Row], badges: dict[str, str]) -> None:
        self.beginResetModel()
        self.tasks = list(tasks)
        self.badges = badges
        self.index_of = {t.id: i for i, t in enumerate(self.tasks)}
        self.started = started_labels(self.tasks, self.untitled)
        self.endResetModel()


class TaskDelegate(QStyledItemDelegate):
    """Paints one row: the title (elided), a coloured state badge and the time of the last activity."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(200, ROW_HEIGHT)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
              ) -> None:
        c = theme.colors()
        painter.save()
        rect = option.rect.adjusted(6, 1, -6, -1)
        state = option.state
        if state & QStyle.StateFlag.State_Selected:
            background = c["selected"]
        elif state & QStyle.StateFlag.State_MouseOver:
            background = c["hover"]
        else:
            background = None
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        if background is not None:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(background))
            painter.drawRoundedRect(rect, 8, 8)
        inner = rect.adjusted(10, 7, -10, -7)
        title_font = QFont(option.font)
        title_font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(title_font)
        painter.setPen(QColor(c["text"]))
        title = QFontMetrics(title_font).elidedText(index.data(), Qt.TextElideMode.ElideRight, inner.width())
        painter.drawText(inner, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, title)
        small = QFont(option.font)
        small.setPointSizeF(max(7.0, option.font.pointSizeF() - 1.5))
        badge = index.data(BADGE)
        wake = index.data(WAKE) if badge == "idle" else None  # an idle task that wakes by itself says when
        badge_font = QFont(small)
        if badge != "idle" or wake:
            badge_font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(badge_font)
        painter.setPen(QColor(c["running"] if wake else c[badge]))
        painter.drawText(inner, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom,
                         f"● {wake or BADGE_TEXT[badge]}")
        painter.setFont(small)
        painter.setPen(QColor(c["muted"]))
        painter.drawText(inner, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                         ago(index.data(UPDATED), time.time()))
        painter.restore()


class TaskSidebar(QWidget):
    task_selected = Signal(str)
    chat_selected = Signal(str)
    team_selected = Signal(str)
    new_requested = Signal()
    new_chat_requested = Signal()
    new_team_requested = Signal()
    rename_requested = Signal(str)  # a task's or a chat's id (the one of the tab shown: `mode`)
    delete_requested = Signal(str)
    settings_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.mode = ""  # set_mode
        self.setObjectName("Sidebar")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 12, 8, 10)
        lay.setSpacing(8)
        head = QHBoxLayout()
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(24, 24))
        brand = QLabel("Hearth")
        brand.setObjectName("PanelTitle")
        head.addWidget(logo)
        head.addWidget(brand, 1)
        lay.addLayout(head)
        self.where = QLabel()  # where the tasks live (set_where)
        self.where.setObjectName("Muted")
        self.where.setWordWrap(True)
        lay.addWidget(self.where)
        self.remote = False
        self.tabs = QTabBar()
        self.tabs.setExpanding(True)
        self.tabs.setDrawBase(False)
        self.tabs.addTab("Tasks")
        self.tabs.addTab("Chats")
        self.tabs.addTab("Teams")
        self.tabs.setTabToolTip(0, "Tasks: a goal, a workspace folder and tools (Ctrl+N for a new one)")
        self.tabs.setTabToolTip(1, "Chats: quick questions, no folder and no tools that change anything "
                                   "(Ctrl+Shift+N for a new one)")
        self.tabs.setTabToolTip(2, "Teams: members that work a plan of assignments together")
        self.tabs.currentChanged.connect(lambda i: self.set_mode(MODES[i]))
        lay.addWidget(self.tabs)
        self.new_button = QPushButton()
        self.new_button.setObjectName("Primary")
        self.new_button.clicked.connect(lambda: {"chats": self.new_chat_requested, "teams": self.new_team_requested}
                                        .get(self.mode, self.new_requested).emit())
        lay.addWidget(self.new_button)
        self.model = TaskListModel(self)
        self.list = self._list(self.model, self.task_selected)
        self.chat_model = TaskListModel(self, untitled="New chat")
        self.chat_list = self._list(self.chat_model, self.chat_selected)
        self.team_model = TaskListModel(self, untitled="New team")
        self.team_list = self._list(self.team_model, self.team_selected)
        self.lists = QStackedWidget()
        for view in (self.list, self.chat_list, self.team_list):
            self.lists.addWidget(view)
        lay.addWidget(self.lists, 1)
        self.empty = QLabel()
        self.empty.setObjectName("Muted")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.empty)
        self.settings = QPushButton("Settings")
        self.settings.clicked.connect(self.settings_requested)
        lay.addWidget(self.settings)
        self._quiet = False
        self.set_mode("tasks")
        self._clock = QTimer(self)  # "5 min ago" ages; repaint what is visible
        self._clock.timeout.connect(lambda: self._shown_list().viewport().update())
        self._clock.start(30_000)
        theme.notifier.changed.connect(self._retheme)

    def set_where(self, where: str, server: str | None, reconnecting: bool = False) -> None:
        """Mark where the tasks live ("This computer", "server: host:port", "… reconnecting…"). A server's
        tasks have no chats, teams or Settings here: their tabs are hidden and the button says why."""
        self.remote = server is not None
        self.where.setText(f"{where} · reconnecting…" if reconnecting else where)
        self.where.setStyleSheet(f"color: {theme.colors()['interrupted']}; font-weight: 600;" if reconnecting else "")
        self.where.setToolTip(
            f"The tasks shown are the Hearth server's at {server}; File ▸ Use This Computer's Tasks goes back."
            + (" The server does not answer: Hearth keeps trying, and open tasks go on where they were." if
               reconnecting else "") if server else "The tasks shown are this computer's (its data folder).")
        for index in (1, 2):
            self.tabs.setTabVisible(index, not self.remote)
        if self.remote:
            self.set_mode("tasks")
        self.settings.setEnabled(not self.remote)
        self.settings.setToolTip("Settings change this computer's Hearth; a server has its own (hearth serve "
                                 "--settings)." if self.remote else "")

    def _list(self, model: TaskListModel, selected: SignalInstance) -> QListView:
        view = QListView()
        view.setObjectName("TaskList")
        view.setModel(model)
        view.setItemDelegate(TaskDelegate(view))
        view.setUniformItemSizes(True)
        view.setMouseTracking(True)
        view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        view.customContextMenuRequested.connect(lambda pos: self._menu(view, pos))
        view.selectionModel().currentChanged.connect(lambda index, _prev: self._changed(index, selected))
        view.setVerticalScrollMode(QListView.ScrollMode.ScrollPerPixel)
        return view

    def set_mode(self, mode: str) -> None:
        """Show the Tasks, Chats or Teams tab."""
        if mode == self.mode:
            return
        self.mode = mode
        index = MODES.index(mode)
        self.tabs.setCurrentIndex(index)
        self.lists.setCurrentIndex(index)
        noun = {"tasks": "task", "chats": "chat", "teams": "team"}[mode]
        self.new_button.setText(f"+  New {noun}")
        self.new_button.setToolTip({"tasks": "New task (Ctrl+N)", "chats": "New chat (Ctrl+Shift+N)"}.get(
            mode, "New team"))
        self._update_empty()

    def _shown_list(self) -> QListView:
        return (self.list, self.chat_list, self.team_list)[MODES.index(self.mode)]

    def _update_empty(self) -> None:
        model = (self.model, self.chat_model, self.team_model)[MODES.index(self.mode)]
        self.empty.setText(f"No {self.mode} yet.")
        self.empty.setVisible(not model.tasks)

    @property
    def rows(self) -> dict[str, str]:
        """Task id -> badge of every task row."""
        return {t.id: self.model.badges.get(t.id, "idle") for t in self.model.tasks}

    def set_tasks(self, tasks: list[TaskInfo], running: set[str]) -> None:
        """Show `tasks` (newest activity first) keeping the selection."""
        self._fill(self.list, self.model, tasks, {t.id: badge_for(t, t.id in running) for t in tasks})

    def set_chats(self, chats: list[ChatInfo], running: set[str]) -> None:
        self._fill(self.chat_list, self.chat_model, chats, {c.id: badge_for(c, c.id in running) for c in chats})

    def set_teams(self, teams: list[TeamInfo]) -> None:
        self._fill(self.team_list, self.team_model, teams, {t.id: team_badge(t) for t in teams})

    def _fill(self, view: QListView, model: TaskListModel, rows: Sequence[Row], badges: dict[str, str]) -> None:
        current = self._current(view)
        self._quiet = True
        try:
            model.set_tasks(rows, badges)
            self._select(view, model, current)
        finally:
            self._quiet = False
        self._update_empty()

    def select(self, task_id: str | None) -> None:
        self._select(self.list, self.model, task_id)

    def select_chat(self, chat_id: str | None) -> None:
        self._select(self.chat_list, self.chat_model, chat_id)

    def select_team(self, team_id: str | None) -> None:
        self._select(self.team_list, self.team_model, team_id)

    def _select(self, view: QListView, model: TaskListModel, row_id: str | None) -> None:
        quiet, self._quiet = self._quiet, True
        try:
            row = model.index_of.get(row_id) if row_id else None
            if row is None:
                view.selectionModel().clear()
            else:
                view.selectionModel().setCurrentIndex(model.index(row),
                                                      QItemSelectionModel.SelectionFlag.ClearAndSelect)
        finally:
            self._quiet = quiet

    def current_task(self) -> str | None:
        return self._current(self.list)

    @staticmethod
    def _current(view: QListView) -> str | None:
        index = view.selectionModel().currentIndex()
        return index.data(TASK_ID) if index.isValid() and view.selectionModel().isSelected(index) else None

    def badge(self, task_id: str) -> str | None:
        return self.model.badges.get(task_id) if task_id in self.model.index_of else None

    def _changed(self, index: QModelIndex, selected: SignalInstance) -> None:
        if not self._quiet and index.isValid():
            selected.emit(index.data(TASK_ID))

    def _menu(self, view: QListView, pos: QPoint) -> None:
        index = view.indexAt(pos)
        if not index.isValid() or self.remote:  # a server's tasks are renamed and deleted there
            return
        tid = index.data(TASK_ID)
        menu = QMenu(self)
        if view is not self.team_list:  # a team's title is its goal, which its members work toward
            menu.addAction("Rename…", lambda: self.rename_requested.emit(tid))
        menu.addAction("Delete…", lambda: self.delete_requested.emit(tid))
        menu.popup(view.viewport().mapToGlobal(pos))

    def _retheme(self, _name: str) -> None:
        for view in (self.list, self.chat_list, self.team_list):
            view.viewport().update()
