"""Citation chips for search_knowledge results: each passage the model was given becomes a chip ("[1] report.pdf ·
page 3") that opens the document at that place.

The tool's result frames every passage as `<passage n=… source=… where=… page=… lines=…>` (the runtime's knowledge
search); `parse_citations` reads those tags. A chip of a text, Markdown, code or log file opens Hearth's own viewer at
the cited lines (app/conversation/source_viewer.py). Any other opens with the desktop's viewer (`QDesktopServices`, or
shows its path with a Copy button when no viewer answers); a PDF page is passed as the URL fragment `#page=N`, which PDF
viewers and browsers honour, and the place is in the chip's tooltip and its `opened` signal for viewers that ignore it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QUrl, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from ..widgets import dialogs
from . import source_viewer

_TAG = re.compile(r"<passage\s+([^>]*)>")
_ATTR = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Citation:
    n: int
    path: str
    where: str
    page: int | None
    lines: tuple[int, int] | None

    @property
    def label(self) -> str:
        return f"[{self.n}] {Path(self.path).name}" + (f" · {self.where}" if self.where else "")

    def url(self) -> QUrl:
        url = QUrl.fromLocalFile(self.path)
        if self.page:
            url.setFragment(f"page={self.page}")
        return url


def parse_citations(result: str | None) -> list[Citation]:
    """The passages a search_knowledge result shows, in order (none for any other text)."""
    out = []
    for tag in _TAG.finditer(result or ""):
        attrs = {k: html.unescape(v) for k, v in _ATTR.findall(tag.group(1))}
        if not attrs.get("source") or not attrs.get("n", "").isdigit():
            continue
        first, _, last = attrs.get("lines", "").partition("-")
        lines = (int(first), int(last)) if first.isdigit() and last.isdigit() else None
        page = int(attrs["page"]) if attrs.get("page", "").isdigit() else None
        out.append(Citation(int(attrs["n"]), attrs["source"], attrs.get("where", ""), page, lines))
    return out


class CitationChip(QPushButton):
    """One cited passage; clicking opens its document at the place."""

    opened = Signal(str, str)  # path, where (page, lines, heading in words)

    def __init__(self, citation: Citation, parent: QWidget | None = None):
        super().__init__(citation.label, parent)
        self.citation = citation
        self.setObjectName("CitationChip")
        self.setFlat(True)
        self.setToolTip(f"{citation.path}\n{citation.where}" if citation.where else citation.path)
        self.clicked.connect(self.open)

    def open(self) -> bool:
        if not Path(self.citation.path).exists():
            self.setToolTip(f"{self.citation.path} is no longer there.")
            return False
        c = self.citation
        if c.lines is not None and source_viewer.shows(c.path, c.lines):
            source_viewer.SourceViewer(self.window(), c.path, c.lines, c.where).show()
            ok = True
        else:
            ok = dialogs.open_path(self.window(), c.path, c.url()) is None
        self.opened.emit(c.path, c.where)
        return ok


class CitationRow(QWidget):
    """The chips of one search_knowledge result, side by side (nothing when it cited nothing)."""

    def __init__(self, result: str | None, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        self.chips = [CitationChip(c, self) for c in parse_citations(result)]
        for chip in self.chips:
            lay.addWidget(chip)
        lay.addStretch(1)
        self.setVisible(bool(self.chips))
