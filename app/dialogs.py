"""Small non-modal dialogs. They use `open()`/`show()` and signals, never `exec()`: a nested Qt event loop
inside qasync breaks the asyncio loop (FACTS: "Cannot enter into task")."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog, QMessageBox, QWidget


def confirm(parent: QWidget | None, title: str, text: str, accept: str, on_accept: Callable[[], None],
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
             on_done: Callable[[str], None]) -> QInputDialog:
    dlg = QInputDialog(parent)
    dlg.setWindowTitle(title)
    dlg.setLabelText(label)
    dlg.setTextValue(value)
    dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dlg.setWindowModality(Qt.WindowModality.NonModal)
    dlg.textValueSelected.connect(on_done)
    dlg.show()
    return dlg


def about(parent: QWidget | None, version: str, home: str) -> QMessageBox:
    box = QMessageBox(parent)
    box.setWindowTitle("About Hearth")
    box.setIcon(QMessageBox.Icon.Information)
    box.setText(f"<b>Hearth</b> {version}")
    box.setInformativeText(
        "An offline-first personal agent. Turns keep running when the window is closed; everything confirmed "
        f"is kept in one local database.<br><br>Data folder: <code>{home}</code>"
    )
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setWindowModality(Qt.WindowModality.NonModal)
    box.show()
    return box
