"""The task sidebar: one row per task with its title, a live state badge and the last activity.

A model/view list: rows are painted by a delegate, not built from widgets, so 1,000 tasks cost what the ~15
visible rows cost."""

from __future__ import annotations

import time

from PySide6.QtCore import QAbstractListModel, QItemSelectionModel, QModelIndex, QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListView,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from . import theme
from .icons import app_icon
from .util import ago

TASK_ID = Qt.ItemDataRole.UserRole
BADGE = Qt.ItemDataRole.UserRole + 1
UPDATED = Qt.ItemDataRole.UserRole + 2
ROW_HEIGHT = 52
BADGE_TEXT = {"running": "running", "waiting": "waiting for you", "interrupted": "interrupted", "error": "error",
              "idle": "idle"}


def badge_for(info, running: bool) -> str:
    if running:
        return "running"
    if info.state == "waiting":
        return "waiting"
    if info.last_reason in ("interrupted", "error"):
        return info.last_reason
    return "idle"


class TaskListModel(QAbstractListModel):
    """The tasks as rows (title, badge, last activity). Cost follows the rows on screen: the view asks only
    for those, and the delegate paints them; there is no widget per row."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.tasks: list = []
        self.badges: dict[str, str] = {}
        self.index_of: dict[str, int] = {}

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: B008 - Qt's own default argument
        return 0 if parent.isValid() else len(self.tasks)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        info = self.tasks[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return info.title or "New task"
        if role == Qt.ItemDataRole.ToolTipRole:
            return info.title or "New task"
        if role == TASK_ID:
            return info.id
        if role == BADGE:
            return self.badges.get(info.id, "idle")
        if role == UPDATED:
            return info.updated_at
        return None

    def set_tasks(self, tasks: list, badges: dict[str, str]) -> None:
        self.beginResetModel()
        self.tasks = list(tasks)
        self.badges = badges
        self.index_of = {t.id: i for i, t in enumerate(self.tasks)}
        self.endResetModel()


class TaskDelegate(QStyledItemDelegate):
    """Paints one row: the title (elided), a coloured state badge and the time of the last activity."""

    def sizeHint(self, option, index) -> QSize:
        return QSize(200, ROW_HEIGHT)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
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
        badge_font = QFont(small)
        if badge != "idle":
            badge_font.setWeight(QFont.Weight.DemiBold)
        painter.setFont(badge_font)
        painter.setPen(QColor(c[badge]))
        painter.drawText(inner, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignBottom, f"● {BADGE_TEXT[badge]}")
        painter.setFont(small)
        painter.setPen(QColor(c["muted"]))
        painter.drawText(inner, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
                         ago(index.data(UPDATED), time.time()))
        painter.restore()


class TaskSidebar(QWidget):
    task_selected = Signal(str)
    new_requested = Signal()
    rename_requested = Signal(str)
    delete_requested = Signal(str)
    settings_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
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
        self.new_button = QPushButton("+  New task")
        self.new_button.setObjectName("Primary")
        self.new_button.setToolTip("New task (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        lay.addWidget(self.new_button)
        self.model = TaskListModel(self)
        self.list = QListView()
        self.list.setObjectName("TaskList")
        self.list.setModel(self.model)
        self.list.setItemDelegate(TaskDelegate(self.list))
        self.list.setUniformItemSizes(True)
        self.list.setMouseTracking(True)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.selectionModel().currentChanged.connect(self._changed)
        self.list.setVerticalScrollMode(QListView.ScrollMode.ScrollPerPixel)
        lay.addWidget(self.list, 1)
        self.empty = QLabel("No tasks yet.")
        self.empty.setObjectName("Muted")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.empty)
        settings = QPushButton("Settings")
        settings.clicked.connect(self.settings_requested)
        lay.addWidget(settings)
        self._quiet = False
        self._clock = QTimer(self)  # "5 min ago" ages; repaint what is visible
        self._clock.timeout.connect(self.list.viewport().update)
        self._clock.start(30_000)
        theme.notifier.changed.connect(self._retheme)

    @property
    def rows(self) -> dict[str, str]:
        """Task id -> badge of every row."""
        return {t.id: self.model.badges.get(t.id, "idle") for t in self.model.tasks}

    def set_tasks(self, tasks: list, running: set[str]) -> None:
        """Show `tasks` (newest activity first) keeping the selection."""
        current = self.current_task()
        self._quiet = True
        try:
            self.model.set_tasks(tasks, {t.id: badge_for(t, t.id in running) for t in tasks})
            self.select(current)
        finally:
            self._quiet = False
        self.empty.setVisible(not tasks)

    def select(self, task_id: str | None) -> None:
        quiet, self._quiet = self._quiet, True
        try:
            row = self.model.index_of.get(task_id) if task_id else None
            if row is None:
                self.list.selectionModel().clear()
            else:
                index = self.model.index(row)
                self.list.selectionModel().setCurrentIndex(
                    index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        finally:
            self._quiet = quiet

    def current_task(self) -> str | None:
        index = self.list.selectionModel().currentIndex()
        return index.data(TASK_ID) if index.isValid() and self.list.selectionModel().isSelected(index) else None

    def badge(self, task_id: str) -> str | None:
        return self.model.badges.get(task_id) if task_id in self.model.index_of else None

    def _changed(self, index: QModelIndex, _prev) -> None:
        if not self._quiet and index.isValid():
            self.task_selected.emit(index.data(TASK_ID))

    def _menu(self, pos: QPoint) -> None:
        index = self.list.indexAt(pos)
        if not index.isValid():
            return
        tid = index.data(TASK_ID)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename_requested.emit(tid))
        menu.addAction("Delete…", lambda: self.delete_requested.emit(tid))
        menu.popup(self.list.viewport().mapToGlobal(pos))

    def _retheme(self, _name: str) -> None:
        self.list.viewport().update()
