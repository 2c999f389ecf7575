"""The cited place of a text document, shown in Hearth: the file read-only, scrolled to the cited lines, which are
highlighted. A citation chip of a text, Markdown, code or log file opens it (a desktop text editor opened by URL
cannot be told which line to show); a PDF or Word file still goes to the desktop's viewer, at its page.

Only a window of WINDOW lines either side of the citation is read, in a worker thread, so a 200 MB log opens at
once and the window never waits for the disk. The dialog is non-modal: a nested Qt event loop would break qasync.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QTextCursor, QTextFormat
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QTextEdit, QVBoxLayout, QWidget

from ..core.util import spawn
from ..widgets import dialogs, theme
from .markdown import mono_font

WINDOW = 2000
DESKTOP_ONLY = (".pdf", ".docx", ".doc", ".html", ".htm")  # cited by page or heading, not by source line


def shows(path: str, lines: tuple[int, int] | None) -> bool:
    """Whether a citation of `path` at `lines` opens here rather than in the desktop's viewer."""
    return lines is not None and Path(path).suffix.lower() not in DESKTOP_ONLY


def read_window(path: str, first: int, last: int, window: int = WINDOW) -> tuple[int, list[str]]:
    """(the number of the first line read, the lines) from `window` lines before `first` to `window` after
    `last`. Lines end at "\n" only, as the indexer counts them: a lone "\r" (a progress bar's) is no line end,
    and is shown as ␍ (Qt would break the line there). Undecodable bytes become U+FFFD rather than failing."""
    start = max(1, first - window)
    with open(path, "rb") as f:
        return start, [line.rstrip(b"\r\n").decode("utf-8", "replace").replace("\r", "\u240d")
                       for line in itertools.islice(f, start - 1, last + window)]


class SourceViewer(QDialog):
    """A text file, read-only, at the cited lines (see the module docstring)."""

    def __init__(self, parent: QWidget | None, path: str, lines: tuple[int, int], where: str = ""):
        super().__init__(parent)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.path, self.lines = path, lines
        self.setWindowTitle(f"{Path(path).name} · {where or f'lines {lines[0]}–{lines[1]}'}")
        lay = QVBoxLayout(self)
        head = QHBoxLayout()
        self.note = QLabel(path)
        self.note.setObjectName("Muted")
        self.note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        head.addWidget(self.note, 1)
        desktop = QPushButton("Open with the desktop")
        desktop.clicked.connect(lambda: dialogs.open_path(self, path))
        head.addWidget(desktop)
        lay.addLayout(head)
        self.view = QPlainTextEdit()
        self.view.setReadOnly(True)
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.view.setFont(mono_font())
        self.view.setPlainText("Reading…")
        lay.addWidget(self.view, 1)
        self.resize(820, 560)
        self.loaded = spawn(self._load(), owner=self, load=True)

    async def _load(self) -> None:
        first, last = self.lines
        try:
            start, text = await asyncio.to_thread(read_window, self.path, first, last)
        except OSError as exc:
            self.view.setPlainText(f"Hearth could not read this file: {exc.strerror or exc}.")
            return
        self.view.setPlainText("\n".join(text))
        end = start + len(text) - 1
        if first > end:  # the file was cut short since it was indexed
            self.note.setText(f"{self.path}  —  the file has only {end} line{'' if end == 1 else 's'} now; it changed "
                              "since it was indexed")
            return
        if start > 1 or len(text) >= last + WINDOW - start + 1:
            self.note.setText(f"{self.path}  —  lines {start}–{end} of the file")
        self._mark(first - start, min(last, end) - start)

    def _mark(self, first_block: int, last_block: int) -> None:
        """Highlight the cited lines and put the first of them near the top."""
        doc = self.view.document()
        cursor = QTextCursor(doc.findBlockByNumber(max(0, first_block)))
        end = doc.findBlockByNumber(max(first_block, last_block))
        # Through the line break, so the last line is highlighted across the whole width too.
        through = min(end.position() + end.length(), doc.characterCount() - 1)
        cursor.setPosition(through, QTextCursor.MoveMode.KeepAnchor)
        mark = QTextEdit.ExtraSelection()
        mark.cursor = cursor
        mark.format.setBackground(QColor(theme.colors()["banner"]))
        mark.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
        self.view.setExtraSelections([mark])
        at = QTextCursor(doc.findBlockByNumber(max(0, first_block - 3)))  # a little context above
        self.view.setTextCursor(at)
        self.view.verticalScrollBar().setValue(max(0, first_block - 3))
        self.view.setTextCursor(QTextCursor(doc.findBlockByNumber(max(0, first_block))))

    def marked_text(self) -> str:
        """The highlighted lines (what the citation points at)."""
        return "\n".join(s.cursor.selectedText().replace("\u2029", "\n").rstrip("\n")
                         for s in self.view.extraSelections())
