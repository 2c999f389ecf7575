"""The tray icon: running tasks, Open, Quit, and desktop notifications. Only built when the platform has a
tray (not under QT_QPA_PLATFORM=offscreen, and under X11 only with a tray host)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from ..widgets.icons import app_icon


def tray_available() -> bool:
    return QSystemTrayIcon.isSystemTrayAvailable()


class Tray(QObject):
    open_requested = Signal()
    quit_requested = Signal()
    task_requested = Signal(str)
    message_clicked = Signal()

    def __init__(self, running: Callable[[], list[tuple[str, str]]], parent: QObject | None = None):
        super().__init__(parent)
        self._running = running
        self.icon = QSystemTrayIcon(app_icon())
        self.icon.setToolTip("Hearth")
        self.menu = QMenu()
        self.menu.aboutToShow.connect(self._fill)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self.icon.messageClicked.connect(self.message_clicked)
        self._fill()
        self.icon.show()

    def _fill(self) -> None:
        self.menu.clear()
        running = self._running()
        header = self.menu.addAction(f"Running: {len(running)} task(s)" if running else "Nothing running")
        header.setEnabled(False)
        for task_id, title in running:
            self.menu.addAction(f"   {title}", partial(self.task_requested.emit, task_id))
        self.menu.addSeparator()
        self.menu.addAction("Open Hearth", self.open_requested.emit)
        self.menu.addAction("Quit Hearth", self.quit_requested.emit)

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.open_requested.emit()

    def set_busy(self, running: int, waiting: int) -> None:
        badge = "#2f7de1" if running else ("#c98a00" if waiting else None)
        self.icon.setIcon(app_icon(badge))
        bits = [f"{running} running" if running else "", f"{waiting} waiting for you" if waiting else ""]
        self.icon.setToolTip("Hearth" + (" — " + ", ".join(b for b in bits if b) if any(bits) else ""))

    def notify(self, title: str, text: str) -> None:
        self.icon.showMessage(title, text, app_icon(), 8000)

    def hide(self) -> None:
        self.icon.hide()
