"""The composer: multi-line input, Enter sends / Shift+Enter newline (or Ctrl+Enter sends when the person
turned Enter-sends off), attachments by button or drag-and-drop, Stop (and Esc) while a turn runs. While the
task is busy, sending queues the input; it runs when the current turn ends."""

from __future__ import annotations

import tempfile
from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import (
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QFontMetrics,
    QKeyEvent,
    QResizeEvent,
    QTextCursor,
)
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..widgets.controls import FileChip


def _local_files(mime) -> list[str]:
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and Path(u.toLocalFile()).is_file()]


PASTE_AS_FILE = 4000  # characters: a longer paste becomes a "Pasted text" attachment


class ComposerEdit(QPlainTextEdit):
    submit = Signal()
    escape = Signal()
    files_dropped = Signal(list)
    long_paste = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ComposerEdit")
        self.enter_sends = True
        self.paste_as_file = True  # False where nothing can be attached (a chat): a long paste stays text
        self.setTabChangesFocus(True)
        self.document().contentsChanged.connect(self._fit)
        self._fit()

    def insertFromMimeData(self, source: QMimeData) -> None:
        if self.paste_as_file and source.hasText() and not source.hasUrls() and len(source.text()) > PASTE_AS_FILE:
            self.long_paste.emit(source.text())
            return
        super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        mods = event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            shift = bool(mods & Qt.KeyboardModifier.ShiftModifier)
            ctrl = bool(mods & Qt.KeyboardModifier.ControlModifier)
            if (self.enter_sends and not shift) or (not self.enter_sends and ctrl):
                self.submit.emit()
                return
            self.insertPlainText("\n")
            return
        if key == Qt.Key.Key_Escape:
            self.escape.emit()
            return
        super().keyPressEvent(event)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if _local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        if _local_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.files_dropped.emit(files)
        else:
            super().dropEvent(event)

    def _fit(self) -> None:
        """Grow with the text, up to a third of the window; scroll beyond."""
        line_h = QFontMetrics(self.font()).lineSpacing()
        window = self.window()
        most = max(4, (window.height() // 3) // line_h if window is not None and window is not self else 8)
        lines = self.document().size().height() if self.document().documentLayout() else 1
        lines = max(1, min(most, int(lines)))
        self.setFixedHeight(lines * line_h + 12)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()


class Composer(QFrame):
    submitted = Signal(str, list)  # text, attachment paths
    stop_requested = Signal()
    edit_cancelled = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Composer")
        self.setAcceptDrops(True)
        self.attachments: list[str] = []
        self.files_allowed = True
        self.running = False
        self.waiting = False  # the task waits for the person's answer (shown above the composer)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        lay.setSpacing(6)
        self.editing = QWidget()  # "Editing your message" bar, shown while an earlier input is being changed
        edit_row = QHBoxLayout(self.editing)
        edit_row.setContentsMargins(0, 0, 0, 0)
        edit_note = QLabel("Editing your last message — sending replaces it.")
        edit_note.setObjectName("Muted")
        edit_row.addWidget(edit_note, 1)
        cancel = QPushButton("Cancel")
        cancel.setObjectName("Link")
        cancel.clicked.connect(self.cancel_edit)
        edit_row.addWidget(cancel)
        self.editing.hide()
        lay.addWidget(self.editing)
        self.chips = QWidget()
        self.chips_lay = QHBoxLayout(self.chips)
        self.chips_lay.setContentsMargins(0, 0, 0, 0)
        self.chips_lay.addStretch(1)
        self.chips.hide()
        lay.addWidget(self.chips)
        self.edit = ComposerEdit()
        self.edit.setPlaceholderText("Message Hearth — Enter to send, Shift+Enter for a new line")
        self.edit.submit.connect(self.submit)
        self.edit.escape.connect(self._escape)
        self.edit.files_dropped.connect(self.add_files)
        self.edit.long_paste.connect(self.add_pasted_text)
        self.edit.textChanged.connect(self._update_send)
        lay.addWidget(self.edit)
        row = QHBoxLayout()
        self.attach = QPushButton("Attach…")
        self.attach.setToolTip("Attach files (or drop them here); they are copied into the task's workspace.")
        self.attach.clicked.connect(self._pick_files)
        row.addWidget(self.attach)
        self.hint = QLabel()
        self.hint.setObjectName("Muted")
        row.addWidget(self.hint, 1)
        self.stop = QPushButton("■ Stop")
        self.stop.setObjectName("Danger")
        self.stop.setToolTip("Stop the running turn (Esc)")
        self.stop.clicked.connect(self.stop_requested)
        self.stop.hide()
        row.addWidget(self.stop)
        self.send = QPushButton("Send")
        self.send.setObjectName("Primary")
        self.send.clicked.connect(self.submit)
        row.addWidget(self.send)
        lay.addLayout(row)
        self._pastes: list[tempfile.TemporaryDirectory] = []
        self._pasted: dict[str, str] = {}  # a pasted file's path -> its text (kept in a draft)
        self._update_send()

    def _update_send(self) -> None:
        """Nothing to send (empty or only spaces, no attachment): Send stays disabled."""
        self.send.setEnabled(bool(self.edit.toPlainText().strip() or self.attachments))

    def set_enter_sends(self, value: bool) -> None:
        self.edit.enter_sends = value
        self.edit.setPlaceholderText(
            "Message Hearth — Enter to send, Shift+Enter for a new line" if value
            else "Message Hearth — Ctrl+Enter to send"
        )

    def set_running(self, running: bool, waiting: bool = False) -> None:
        """A turn runs, or (`waiting`) the task waits for the person's answer: Stop ends either."""
        self.running, self.waiting = running, waiting and not running
        self.stop.setVisible(running or self.waiting)
        self.stop.setEnabled(True)
        self.stop.setToolTip("Stop the running turn (Esc)" if running else
                             "Stop waiting: the request is dropped and nothing it asked for runs (Esc)")
        self.send.setText("Queue" if running else "Send")
        self.send.setToolTip("Runs when the current turn ends" if running else "")
        self.hint.setText("Working… you can queue another message." if running else
                          "Waiting for your answer above — or Stop." if self.waiting else "")

    def submit(self) -> None:
        text = self.edit.toPlainText().strip()
        if not text and not self.attachments:
            return
        files = list(self.attachments)
        self.edit.clear()
        self.clear_attachments()
        self.submitted.emit(text, files)

    def start_edit(self, text: str) -> None:
        self.editing.show()
        self.attach.setEnabled(False)
        self.edit.setPlainText(text)
        self.edit.setFocus()

    def cancel_edit(self) -> None:
        if self.editing.isVisible():
            self.editing.hide()
            self.attach.setEnabled(True)
            self.edit.clear()
            self.edit_cancelled.emit()

    @property
    def is_editing(self) -> bool:
        return not self.editing.isHidden()

    def restore(self, text: str, files: list[str]) -> None:
        """Put an input back when sending it failed, so nothing typed is lost."""
        if not self.edit.toPlainText():
            self.edit.setPlainText(text)
        self.add_files(files)

    def _escape(self) -> None:
        if self.running or self.waiting:
            self.stop.setEnabled(False)
            self.stop_requested.emit()

    # -- attachments --

    def add_pasted_text(self, text: str) -> None:
        """A long paste travels as a text file ("Pasted text N.txt"), not as a wall of text in the box."""
        folder = tempfile.TemporaryDirectory(prefix="hearth-paste-")
        self._pastes.append(folder)
        path = Path(folder.name) / f"Pasted text {len(self._pastes)}.txt"
        path.write_text(text, encoding="utf-8")
        self._pasted[str(path)] = text
        self.add_files([str(path)])

    def draft(self) -> dict | None:
        """What is typed and attached but not sent (None: nothing). Long pastes are kept by their text: their
        temporary files go with this composer."""
        text, files = self.edit.toPlainText(), list(self.attachments)
        if (not text.strip() and not files) or not self.editing.isHidden():  # an edit of a sent message ends here
            return None
        return {"text": text, "files": [f for f in files if f not in self._pasted],
                "pasted": [self._pasted[f] for f in files if f in self._pasted]}

    def restore_draft(self, draft: dict) -> None:
        """Put a draft back (files that are gone since are left out)."""
        self.edit.setPlainText(str(draft.get("text") or ""))
        self.add_files([f for f in draft.get("files") or [] if isinstance(f, str) and Path(f).is_file()])
        for text in draft.get("pasted") or []:
            if isinstance(text, str) and self.files_allowed:
                self.add_pasted_text(text)
        self.edit.moveCursor(QTextCursor.MoveOperation.End)

    def _pick_files(self) -> None:
        dlg = QFileDialog(self, "Attach files", str(Path.home()))
        dlg.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.filesSelected.connect(self.add_files)
        dlg.open()  # non-modal: a nested event loop would break qasync

    def without_files(self) -> None:
        """A chat's composer: text only (a chat has no workspace to copy files into)."""
        self.files_allowed = False
        self.edit.paste_as_file = False
        self.attach.hide()
        self.setAcceptDrops(False)

    def add_files(self, files: list[str]) -> None:
        if not self.files_allowed:
            return
        for f in files:
            if f and f not in self.attachments:
                self.attachments.append(f)
                self._add_chip(f)
        self.chips.setVisible(bool(self.attachments))
        self._update_send()

    def _add_chip(self, path: str) -> None:
        chip = FileChip(path, "Remove")
        chip.remove_button.clicked.connect(lambda: self._remove(path, chip))
        self.chips_lay.insertWidget(self.chips_lay.count() - 1, chip)

    def _remove(self, path: str, chip: QWidget) -> None:
        if path in self.attachments:
            self.attachments.remove(path)
        chip.deleteLater()
        self.chips.setVisible(bool(self.attachments))
        self._update_send()

    def clear_attachments(self) -> None:
        self.attachments = []
        while self.chips_lay.count() > 1:
            item = self.chips_lay.takeAt(0)
            if item is not None and (w := item.widget()) is not None:
                w.deleteLater()
        self.chips.hide()
        self._update_send()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if _local_files(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        files = _local_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.add_files(files)
