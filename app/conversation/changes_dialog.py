"""A turn's changes to its task's workspace (runtime/ARCHITECTURE.md, "A turn's changes"): the files it created,
modified and deleted, the diff of the one chosen (text files), and "Undo this turn's changes", which asks before
overwriting files that changed since (naming them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..widgets.dialogs import confirm
from ..widgets.theme import colors

if TYPE_CHECKING:
    from runtime.api import FileChange, TurnChanges

    from ..core.bridge import RuntimeBridge

KIND_MARKS = {"created": "+ created", "modified": "~ modified", "deleted": "− deleted"}


def files_line(count: int) -> str:
    """What an answer's footer link says."""
    return f"{count} file{'' if count == 1 else 's'} changed"


class ChangesDialog(QDialog):
    def __init__(self, bridge: RuntimeBridge, task_id: str, turn: TurnChanges, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge, self.task_id, self.turn = bridge, task_id, turn
        self.setWindowTitle(f"Changes of turn {turn.number}")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(860, 520)
        lay = QVBoxLayout(self)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        lay.addWidget(self.summary)
        split = QSplitter()
        self.files = QListWidget()
        for change in turn.files:
            item = QListWidgetItem(f"{KIND_MARKS[change.kind]}   {change.path}")
            item.setData(Qt.ItemDataRole.UserRole, change.path)
            if change.cannot_undo:
                item.setToolTip(f"Cannot be undone: {change.cannot_undo}.")
            self.files.addItem(item)
        self.files.currentItemChanged.connect(self._show_file)
        split.addWidget(self.files)
        self.diff = QPlainTextEdit()
        self.diff.setReadOnly(True)
        self.diff.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.diff.setFont(QFont("monospace"))
        split.addWidget(self.diff)
        split.setSizes([280, 580])
        lay.addWidget(split, 1)
        self.status = QLabel()
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        row = QHBoxLayout()
        self.undo = QPushButton("Undo this turn's changes")
        self.undo.clicked.connect(lambda: self._undo(force=False))
        row.addWidget(self.undo)
        row.addStretch(1)
        # The cap of what is kept to undo changes (every task's): seen and changed here, where it matters.
        self.kept = QLabel()
        self.kept.setObjectName("Muted")
        row.addWidget(self.kept)
        self.cap = QSpinBox()
        self.cap.setRange(0, 1024 * 1024)
        self.cap.setSuffix(" MB")
        self.cap.setToolTip("Earlier contents kept to undo changes, at most; over it the oldest turns' go first")
        row.addWidget(self.cap)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        row.addWidget(buttons)
        lay.addLayout(row)
        self.refusal: QWidget | None = None
        self._show_state()
        if turn.files:
            self.files.setCurrentRow(0)
        self.bridge.run(self._show_kept(), owner=self)
        self.cap.editingFinished.connect(self._set_cap)

    async def _show_kept(self) -> None:
        used, cap = await self.bridge.changes.usage()
        self.kept.setText(f"Kept to undo changes: {_size(used)} of at most")
        self.cap.blockSignals(True)
        self.cap.setValue(cap // 1_000_000)
        self.cap.blockSignals(False)

    def _set_cap(self) -> None:
        async def save() -> None:
            await self.bridge.changes.set_cap(self.cap.value() * 1_000_000)
            await self._show_kept()

        self.bridge.run(save(), owner=self)

    def _show_state(self) -> None:
        turn = self.turn
        files = [f for f in turn.files if not f.path.endswith("/")]
        kinds = [sum(f.kind == k for f in files) for k in ("created", "modified", "deleted")]
        said = ", ".join(f"{n} {k}" for n, k in zip(kinds, ("created", "modified", "deleted"), strict=True) if n)
        lost = [f for f in turn.files if f.cannot_undo]
        self.summary.setText(f"Turn {turn.number} changed {files_line(len(files)).removesuffix(' changed')} in the "
                             f"task's folder: {said}." + (" Undone." if turn.undone else ""))
        self.undo.setEnabled(not turn.undone)
        if lost and not turn.undone:
            self.status.setText("Cannot be undone: " + "; ".join(f"{f.path} ({f.cannot_undo})" for f in lost))

    def _show_file(self, item: QListWidgetItem | None, _old: QListWidgetItem | None = None) -> None:
        if item is None:
            return
        change = next(f for f in self.turn.files if f.path == item.data(Qt.ItemDataRole.UserRole))

        async def load() -> None:
            text = await self.bridge.changes.diff(self.task_id, self.turn.turn_id, change.path)
            self._set_diff(change, text)

        self.bridge.run(load(), owner=self)

    def _set_diff(self, change: FileChange, text: str | None) -> None:
        self.diff.clear()
        if text is None:
            self.diff.setPlainText(_no_diff(change))
            return
        c = colors()
        cursor = self.diff.textCursor()
        for line in text.splitlines(keepends=True):
            fmt = QTextCharFormat()
            if line.startswith("+") and not line.startswith("+++"):
                fmt.setBackground(_tint(c["done"]))
            elif line.startswith("-") and not line.startswith("---"):
                fmt.setBackground(_tint(c["error"]))
            elif line.startswith("@@"):
                fmt.setForeground(QColor(c["muted"]))
            cursor.insertText(line, fmt)
        self.diff.moveCursor(QTextCursor.MoveOperation.Start)

    def _undo(self, force: bool) -> None:
        async def undo() -> None:
            try:
                put_back = await self.bridge.changes.undo(self.task_id, self.turn.number, force=force)
            except self.bridge.api.UndoRefused as refused:
                self._refused(refused.changed, refused.cannot, str(refused))
                return
            self.turn = (await self.bridge.changes.list(self.task_id, self.turn.number))[0]
            self._show_state()
            self.status.setText(f"Put back: {', '.join(put_back) or 'nothing'}.")

        self.bridge.run(undo(), owner=self)

    def _refused(self, changed: list[str], cannot: list[str], said: str) -> None:
        self.status.setText(said.split(" Undo anyway")[0])
        if not changed and not cannot:  # not about files (the turn still runs): said in the status line
            return
        lines = []
        if changed:
            lines.append(f"Changed since this turn: {', '.join(changed)}.")
        if cannot:
            lines.append(f"Cannot be put back (their earlier content was not kept): {', '.join(cannot)}.")
        self.refusal = confirm(
            self, "Undo this turn's changes?", "\n".join(lines), "Undo anyway", lambda: self._undo(force=True),
            informative="Undoing anyway overwrites them with how they were before this turn"
                        + (" (a file that cannot be put back stays as it is)." if cannot else "."), danger=True)


def _size(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def _tint(color: str) -> QColor:
    tint = QColor(color)
    tint.setAlpha(60)
    return tint


def _no_diff(change: FileChange) -> str:
    if change.path.endswith("/"):
        return f"A folder the turn {change.kind}: nothing to compare."
    if change.cannot_undo:
        return f"No diff: {change.cannot_undo}."
    return "No diff to show: not a text file, or too big to have been kept (over 1 MiB)."
