"""The task sidebar: one row per task with its title, a live state badge and the last activity."""

from __future__ import annotations

import time

from PySide6.QtCore import QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from . import theme
from .icons import app_icon
from .util import ago

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


class TaskRow(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 7, 10, 7)
        lay.setSpacing(2)
        self.title = QLabel()
        self.title.setObjectName("TaskTitle")
        lay.addWidget(self.title)
        meta = QHBoxLayout()
        meta.setSpacing(6)
        self.badge = QLabel()
        self.when = QLabel()
        self.when.setObjectName("TaskMeta")
        meta.addWidget(self.badge)
        meta.addStretch(1)
        meta.addWidget(self.when)
        lay.addLayout(meta)
        self.state = "idle"
        self.updated_at = 0.0

    def set_task(self, info, badge: str) -> None:
        title = info.title or "New task"
        metrics = self.title.fontMetrics()
        self.title.setText(metrics.elidedText(title, Qt.TextElideMode.ElideRight, 210))
        self.title.setToolTip(title)
        self.state = badge
        self.updated_at = info.updated_at
        self.paint_badge()
        self.refresh_time()

    def paint_badge(self) -> None:
        color = theme.colors()[self.state]
        self.badge.setText(f"● {BADGE_TEXT[self.state]}")
        weight = "600" if self.state != "idle" else "400"
        self.badge.setStyleSheet(f"color: {color}; font-weight: {weight}; font-size: 11px;")

    def refresh_time(self) -> None:
        self.when.setText(ago(self.updated_at, time.time()))


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
        self.list = QListWidget()
        self.list.setObjectName("TaskList")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.currentItemChanged.connect(self._changed)
        self.list.setVerticalScrollMode(QListWidget.ScrollMode.ScrollPerPixel)
        lay.addWidget(self.list, 1)
        self.empty = QLabel("No tasks yet.")
        self.empty.setObjectName("Muted")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.empty)
        settings = QPushButton("Settings")
        settings.clicked.connect(self.settings_requested)
        lay.addWidget(settings)
        self.rows: dict[str, TaskRow] = {}
        self._items: dict[str, QListWidgetItem] = {}
        self._quiet = False
        self._clock = QTimer(self)
        self._clock.timeout.connect(self._tick)
        self._clock.start(30_000)
        theme.notifier.changed.connect(self._retheme)

    def set_tasks(self, tasks: list, running: set[str]) -> None:
        """Show `tasks` (newest activity first) keeping the selection."""
        current = self.current_task()
        self._quiet = True
        try:
            ids = [t.id for t in tasks]
            for tid in [t for t in self._items if t not in ids]:
                self.list.takeItem(self.list.row(self._items.pop(tid)))
                self.rows.pop(tid)
            for index, info in enumerate(tasks):
                item = self._items.get(info.id)
                if item is None:
                    item = QListWidgetItem()
                    item.setData(Qt.ItemDataRole.UserRole, info.id)
                    row = TaskRow()
                    self.list.insertItem(index, item)
                    self.list.setItemWidget(item, row)
                    self._items[info.id] = item
                    self.rows[info.id] = row
                elif self.list.row(item) != index:
                    self.list.takeItem(self.list.row(item))
                    self.list.insertItem(index, item)
                    row_widget = TaskRow()  # a taken item loses its widget
                    self.list.setItemWidget(item, row_widget)
                    self.rows[info.id] = row_widget
                self.rows[info.id].set_task(info, badge_for(info, info.id in running))
                item.setSizeHint(QSize(200, 52))
            if current in self._items:
                self.list.setCurrentItem(self._items[current])
        finally:
            self._quiet = False
        self.empty.setVisible(not tasks)

    def select(self, task_id: str | None) -> None:
        self._quiet = True
        try:
            item = self._items.get(task_id) if task_id else None
            self.list.setCurrentItem(item)
            if item is None:
                self.list.clearSelection()
        finally:
            self._quiet = False

    def current_task(self) -> str | None:
        item = self.list.currentItem()
        return item.data(Qt.ItemDataRole.UserRole) if item is not None else None

    def badge(self, task_id: str) -> str | None:
        row = self.rows.get(task_id)
        return row.state if row else None

    def _changed(self, item, _prev) -> None:
        if not self._quiet and item is not None:
            self.task_selected.emit(item.data(Qt.ItemDataRole.UserRole))

    def _menu(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        tid = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename_requested.emit(tid))
        menu.addAction("Delete…", lambda: self.delete_requested.emit(tid))
        menu.popup(self.list.viewport().mapToGlobal(pos))

    def _retheme(self, _name: str) -> None:
        for row in self.rows.values():
            row.paint_badge()

    def _tick(self) -> None:
        for row in self.rows.values():
            row.refresh_time()
