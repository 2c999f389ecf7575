"""Small non-modal dialogs. They use `open()`/`show()` and signals, never `exec()`: a nested Qt event loop
inside qasync breaks the asyncio loop ("Cannot enter into task")."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


def error_line() -> QLabel:
    """A form dialog's line for what went wrong, hidden until there is something to say."""
    line = QLabel()
    line.setWordWrap(True)
    line.setStyleSheet("color: #cf3a3a;")
    line.hide()
    return line


def action_buttons(text: str, on_accept: Callable[[], object], on_cancel: Callable[[], object]
                   ) -> tuple[QDialogButtonBox, QPushButton]:
    """Cancel and the dialog's one action (the default, styled as primary); the box and the action's button."""
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
    action = buttons.addButton(text, QDialogButtonBox.ButtonRole.AcceptRole)
    action.setObjectName("Primary")
    action.setDefault(True)
    buttons.accepted.connect(on_accept)
    buttons.rejected.connect(on_cancel)
    return buttons, action


def confirm(parent: QWidget | None, title: str, text: str, accept: str, on_accept: Callable[[], object],
            informative: str = "", danger: bool = False) -> QMessageBox:
    box = QMessageBox(parent)
    box.setWindowTitle(title)
    box.setIcon(QMessageBox.Icon.Warning if danger else QMessageBox.Icon.Question)
    box.setText(text)
    if informative:
        box.setInformativeText(informative)
    ok = box.addButton(accept, QMessageBox.ButtonRole.AcceptRole)
    if danger:
        ok.setObjectName("Danger")
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setWindowModality(Qt.WindowModality.NonModal)

    def clicked(button) -> None:
        if button is ok:
            on_accept()

    box.buttonClicked.connect(clicked)
    box.show()
    return box


def choose(parent: QWidget | None, title: str, text: str, choices: list[tuple[str, Callable[[], None]]],
           informative: str = "") -> QMessageBox:
    """A question with named answers; the first is the default (Enter), closing the box picks nothing."""
    box = QMessageBox(parent)
    box.setWindowTitle(title)
    box.setIcon(QMessageBox.Icon.Question)
    box.setText(text)
    if informative:
        box.setInformativeText(informative)
    actions = {}
    for i, (label, action) in enumerate(choices):
        button = box.addButton(label, QMessageBox.ButtonRole.AcceptRole)
        actions[button] = action
        if i == 0:
            box.setDefaultButton(button)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setWindowModality(Qt.WindowModality.NonModal)
    box.buttonClicked.connect(lambda button: actions.get(button, lambda: None)())
    box.show()
    return box


def ask_text(parent: QWidget | None, title: str, label: str, value: str,
             on_done: Callable[[str], object]) -> QInputDialog:
    dlg = QInputDialog(parent)
    dlg.setWindowTitle(title)
    dlg.setLabelText(label)
    dlg.setTextValue(value)
    dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dlg.setWindowModality(Qt.WindowModality.NonModal)
    dlg.textValueSelected.connect(on_done)
    dlg.show()
    return dlg


def open_path(parent: QWidget | None, path: str | Path, url: QUrl | None = None) -> PathDialog | None:
    """Open a folder or file with the desktop (its file manager, its viewer). When nothing answers (no file
    manager, a bare or headless session: `openUrl` returns False), show the path with a Copy button instead, so
    the person can still get there. Returns that dialog, or None when the desktop took the path."""
    if QDesktopServices.openUrl(url or QUrl.fromLocalFile(str(path))):
        return None
    return PathDialog(parent, str(path))


class PathDialog(QDialog):
    """Where a folder or file is, for when the desktop cannot open it: its path, selectable, and Copy."""

    def __init__(self, parent: QWidget | None, path: str):
        super().__init__(parent)
        self.path = path
        thing = "folder" if Path(path).is_dir() else "file"
        self.setWindowTitle(f"Open {thing}")
        lay = QVBoxLayout(self)
        note = QLabel(f"Nothing on this computer answered to open this {thing}. You can copy its path:")
        note.setWordWrap(True)
        lay.addWidget(note)
        self.field = QLineEdit(path)
        self.field.setReadOnly(True)
        self.field.setMinimumWidth(min(720, max(360, self.field.fontMetrics().horizontalAdvance(path) + 24)))
        self.field.setCursorPosition(0)
        lay.addWidget(self.field)
        buttons = QDialogButtonBox()
        self.copy = buttons.addButton("Copy", QDialogButtonBox.ButtonRole.ActionRole)  # keeps the dialog open
        self.copy.clicked.connect(self._copy)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.show()

    def _copy(self) -> None:
        QApplication.clipboard().setText(self.path)
        self.copy.setText("Copied")


def app_version() -> str:
    """The installed distribution's version; the installers bundle its metadata, so this works frozen too."""
    try:
        return importlib.metadata.version("hearth")
    except importlib.metadata.PackageNotFoundError:  # a bare checkout on sys.path, never installed
        return "(development)"


def about(parent: QWidget | None, home: str, logs: str) -> QMessageBox:
    box = QMessageBox(parent)
    box.setWindowTitle("About Hearth")
    box.setIcon(QMessageBox.Icon.Information)
    box.setText(f"<b>Hearth</b> {app_version()}")
    box.setInformativeText(
        "An offline-first personal agent. Turns keep running when the window is closed; everything confirmed "
        f"is kept in one local database.<br><br>Data folder: <code>{home}</code><br>Logs: <code>{logs}</code>"
    )
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setWindowModality(Qt.WindowModality.NonModal)
    box.show()
    return box
