"""A tool call as a card: name, arguments, live state, and its result (collapsed; long output truncated with
"Show all"). Built from a persisted tool part or from live `tool_call` events; both carry the same fields.
The result's text view is only created when the person expands it: most cards are never opened. A
search_knowledge result also shows its cited passages as chips under the card's toggle, visible while the
result is collapsed: clicking one opens the document (app/conversation/citation.py)."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..core.util import human_size
from ..widgets import theme
from ..widgets.controls import Disclosure
from .citation import CitationRow
from .markdown import mono_font

STATE_LABELS = {
    "pending": "pending", "running": "running…", "done": "done", "error": "failed", "denied": "denied",
    "interrupted": "interrupted", "stopped": "stopped", "waiting": "waiting for you",
}
STATE_COLORS = {
    "pending": "idle", "running": "running", "done": "done", "error": "error", "denied": "waiting",
    "interrupted": "interrupted", "stopped": "interrupted", "waiting": "waiting",
}
TRUNCATE_CHARS = 2000
TRUNCATE_LINES = 30
ARGS_LINES = 8
PROGRESS_PEEK = 3  # a helper's newest steps shown while its card's step list is closed
CITING_TOOL = "search_knowledge"


def args_text(args: dict) -> str:
    """Arguments as `key: value` lines (strings unquoted), at most ARGS_LINES lines of 160 characters."""
    if not args:
        return ""
    lines: list[str] = []
    for key, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        first, *rest = text.splitlines() or [""]
        lines.append(f"{key}: {first}")
        lines.extend(f"    {line}" for line in rest)
    if len(lines) > ARGS_LINES:
        lines = [*lines[: ARGS_LINES - 1], "  …"]
    return "\n".join(line if len(line) <= 160 else line[:157] + "…" for line in lines)


def truncate(text: str) -> tuple[str, bool]:
    lines = text.splitlines()
    if len(text) <= TRUNCATE_CHARS and len(lines) <= TRUNCATE_LINES:
        return text, False
    cut = "\n".join(lines[:TRUNCATE_LINES])[:TRUNCATE_CHARS]
    return cut + "\n…", True


class ToolCard(QFrame):
    def __init__(self, part: dict, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ToolCard")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.call_id = part.get("call_id", "")
        self.name = part.get("name", "")
        self.state = ""
        self.result: str | None = None
        self.waiting = False
        self.show_all = False
        lay = self.lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        lay.setSpacing(4)

        head = QHBoxLayout()
        self.icon = QLabel("⚙")
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        font = mono_font()
        font.setBold(True)
        self.title.setFont(font)
        self.badge = QLabel()
        head.addWidget(self.icon)
        head.addWidget(self.title)
        head.addStretch(1)
        head.addWidget(self.badge)
        lay.addLayout(head)

        self.args = QLabel()
        self.args.setObjectName("Muted")
        self.args.setFont(mono_font())
        self.args.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # Ignored width: a long argument line is clipped instead of widening the whole conversation.
        self.args.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        lay.addWidget(self.args)

        self.note = QLabel()
        self.note.setWordWrap(True)
        lay.addWidget(self.note)

        self.toggle = QToolButton()
        self.toggle.setObjectName("Toggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.toggle.toggled.connect(self._show_result)
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)

        # A delegated helper's steps, as they happen: the newest few, or all of them when opened.
        self.progress_toggle = Disclosure()
        self.progress_toggle.toggled.connect(self._show_progress)
        self.progress_toggle.hide()
        lay.addWidget(self.progress_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.progress = QLabel()
        self.progress.setObjectName("Muted")
        self.progress.setFont(mono_font())
        self.progress.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.progress.hide()
        lay.addWidget(self.progress)
        self._progress_lines: list[str] = []
        self.citations: CitationRow | None = None
        self.result_view: QPlainTextEdit | None = None
        self.more: QPushButton | None = None
        theme.notifier.changed.connect(self._retheme)
        self._fill_result()
        self.update_part(part)

    def add_progress(self, line: str) -> None:
        """A line of a running helper's progress."""
        self._progress_lines.append(line)
        self._show_progress()

    def _show_progress(self, *_args) -> None:
        lines, opened = self._progress_lines, self.progress_toggle.isChecked()
        self.progress.setText("\n".join(lines if opened else lines[-PROGRESS_PEEK:]))
        self.progress.setVisible(bool(lines))
        self.progress_toggle.setText(f"Helper steps ({len(lines)})")
        self.progress_toggle.setToolTip("Show only the newest steps" if opened else "Show every step")
        self.progress_toggle.setVisible(len(lines) > PROGRESS_PEEK)  # nothing more to open otherwise

    def update_part(self, part: dict) -> None:
        self.name = part.get("name", self.name)
        self.title.setText(self.name)
        text = args_text(part.get("args") or {})
        self.args.setText(text)
        self.args.setVisible(bool(text))
        state = part.get("state", "pending")
        result = part.get("result")
        note = part.get("note")
        self.note.setText(f"⚠ {note}" if note else "")
        self.note.setVisible(bool(note))
        saved = part.get("progress")  # a saved helper's steps; live ones come one by one through add_progress
        if saved and saved != self._progress_lines:
            self._progress_lines = list(saved)
            self._show_progress()
        if result != self.result:
            self.result = result
            self._fill_result()
            self._fill_citations()
        if state != self.state:
            self.state = state
            # A failed call opens its result: the person wants to see why.
            if state == "error" and self.result:
                self.toggle.setChecked(True)
        self._paint_state()

    def set_waiting(self, waiting: bool) -> None:
        if waiting != self.waiting:
            self.waiting = waiting
            self._paint_state()

    def _retheme(self, _name: str) -> None:
        self._paint_state()

    def _paint_state(self) -> None:
        shown = "waiting" if self.waiting and self.state == "pending" else self.state
        color = theme.colors()[STATE_COLORS.get(shown, "idle")]
        self.badge.setText(f"● {STATE_LABELS.get(shown, shown)}")
        self.badge.setStyleSheet(f"color: {color}; font-weight: 600;")
        self.icon.setStyleSheet(f"color: {color};")

    @property
    def expanded(self) -> bool:
        return self.toggle.isChecked()

    def _result_widgets(self) -> tuple[QPlainTextEdit, QPushButton]:
        if self.result_view is None or self.more is None:  # made together, on the first showing
            view = self.result_view = QPlainTextEdit()
            view.setObjectName("Result")
            view.setReadOnly(True)
            view.setFont(mono_font())
            view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
            self.lay.addWidget(view)
            more = self.more = QPushButton()
            more.setObjectName("Link")
            more.setCursor(Qt.CursorShape.PointingHandCursor)
            more.clicked.connect(self._show_everything)
            self.lay.addWidget(more, 0, Qt.AlignmentFlag.AlignLeft)
        return self.result_view, self.more

    def _hide_result(self) -> None:
        if self.result_view is not None and self.more is not None:
            self.result_view.hide()
            self.more.hide()

    def _fill_result(self) -> None:
        result = self.result
        self.toggle.setVisible(bool(result))
        if not result:
            self._hide_result()
            return
        lines = result.count("\n") + 1
        self.toggle.setText(f"Result · {lines} line{'s' if lines != 1 else ''}, {human_size(len(result))}")
        self._show_result(self.toggle.isChecked())

    def _fill_citations(self) -> None:
        if self.citations is not None:
            self.citations.setParent(None)
            self.citations.deleteLater()
            self.citations = None
        if self.name != CITING_TOOL or not self.result:
            return
        row = CitationRow(self.result)
        if row.chips:
            self.citations = row
            self.lay.insertWidget(self.lay.indexOf(self.toggle) + 1, row)
        else:
            row.deleteLater()

    def _show_result(self, shown: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        if not shown or not self.result:
            self._hide_result()
            return
        view, more = self._result_widgets()
        text, cut = (self.result, False) if self.show_all else truncate(self.result)
        if view.toPlainText() != text:
            view.setPlainText(text)
        line_h = QFontMetrics(view.font()).lineSpacing()
        rows = min(text.count("\n") + 1, 24)
        view.setFixedHeight(rows * line_h + 14)
        view.show()
        more.setText(f"Show all ({self.result.count(chr(10)) + 1} lines)")
        more.setVisible(cut)

    def _show_everything(self) -> None:
        self.show_all = True
        self._show_result(True)

    @property
    def shown_result(self) -> str:
        view = self.result_view
        return "" if view is None or view.isHidden() else view.toPlainText()
