"""Markdown rendering for assistant text: Qt's own Markdown importer (GitHub dialect), a tiny regex highlighter
for fenced code blocks, and a browser that grows to fit its document instead of scrolling.

`MarkdownView.source` is the exact text it shows (tests compare it with the persisted text). While a part
streams, rendering is throttled by its own cost (a re-render never takes more than about a quarter of the
time), so a 100 KB answer stays responsive; the final text is always rendered.
"""

from __future__ import annotations

import math
import re
import time

from PySide6.QtCore import QSizeF, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QSyntaxHighlighter,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser

from . import theme

_CODE_LANG = QTextFormat.Property.BlockCodeLanguage
_CODE_FENCE = QTextFormat.Property.BlockCodeFence

KEYWORDS = frozenset(
    """
    and as assert async await break case catch class const continue def default del do elif else enum except
    export extends false False final finally fn for from func function go if impl import in interface is lambda
    let loop match mod mut new nil None not null or package pass pub raise return self static struct super
    switch then this throw true True try type typeof use var void while with yield fi done esac echo local
    """.split()
)
_HASH_COMMENT = {"python", "py", "sh", "bash", "shell", "zsh", "ruby", "rb", "yaml", "yml", "toml", "perl",
                 "r", "make", "makefile", "dockerfile", "ini", "conf", "console"}
_DASH_COMMENT = {"sql", "lua", "haskell", "hs"}
_TOKEN = re.compile(
    r"""(?P<str>"(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?)"""
    r"|(?P<num>\b\d+(?:\.\d+)?\b)"
    r"|(?P<fn>\b[A-Za-z_]\w*(?=\())"
    r"|(?P<word>\b[A-Za-z_]\w*\b)"
    r"|(?P<comment>\#.*|//.*|--.*)"
)


def mono_font() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


class CodeHighlighter(QSyntaxHighlighter):
    """Colours keywords, strings, numbers, calls and line comments inside fenced code blocks only."""

    def highlightBlock(self, text: str) -> None:
        fmt = self.currentBlock().blockFormat()
        if not fmt.hasProperty(_CODE_FENCE) and not fmt.hasProperty(_CODE_LANG):
            return
        lang = str(fmt.property(_CODE_LANG) or "").lower()
        c = theme.colors()
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            if kind == "comment":
                mark = m.group()[:2]
                ok = (mark[0] == "#" and (lang in _HASH_COMMENT or not lang)) or (
                    mark == "//" and lang not in _HASH_COMMENT) or (mark == "--" and lang in _DASH_COMMENT)
                if ok:
                    self.setFormat(m.start(), len(text) - m.start(), _fmt(c["comment"], italic=True))
                    return
                continue
            if kind == "word":
                if m.group() not in KEYWORDS:
                    continue
                color = c["kw"]
            else:
                color = c[kind]
            self.setFormat(m.start(), m.end() - m.start(), _fmt(color))


def _fmt(color: str, italic: bool = False) -> QTextCharFormat:
    f = QTextCharFormat()
    f.setForeground(QColor(color))
    if italic:
        f.setFontItalic(True)
    return f


class MarkdownView(QTextBrowser):
    """A read-only Markdown block that grows with its content."""

    MIN_RENDER_GAP = 0.0

    def __init__(self, text: str = "", *, muted: bool = False, parent=None):
        super().__init__(parent)
        self.setOpenExternalLinks(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(1)
        self.muted = muted
        self.source = text
        self.renders = 0
        self._dirty = bool(text)
        self._next_ok = 0.0
        self._timer: QTimer | None = None
        self._highlighter = CodeHighlighter(self.document())
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        theme.notifier.changed.connect(self._retheme)
        self.setFixedHeight(4)
        if text:
            self.render_now()

    # -- content --

    def add_text(self, text: str) -> None:
        if text:
            self.source += text
            self._dirty = True

    def set_text(self, text: str) -> None:
        if text != self.source:
            self.source = text
            self._dirty = True

    def request_render(self) -> None:
        """Render now unless the last render was costly; then render once its quiet time has passed."""
        if not self._dirty:
            return
        wait = self._next_ok - time.perf_counter()
        if wait <= 0:
            self.render_now()
            return
        if self._timer is None:
            self._timer = QTimer(self)
            self._timer.setSingleShot(True)
            self._timer.timeout.connect(self.request_render)
        if not self._timer.isActive():
            self._timer.start(math.ceil(wait * 1000))

    def render_now(self) -> None:
        t0 = time.perf_counter()
        self._dirty = False
        doc = self.document()
        doc.setMarkdown(self.source)
        self._decorate()
        self.renders += 1
        cost = time.perf_counter() - t0
        # Spend at most ~25% of the time re-rendering a long streaming part.
        self._next_ok = time.perf_counter() + (3 * cost if cost > 0.004 else 0.0)
        if self._timer is not None:
            self._timer.stop()

    def flush(self) -> None:
        if self._dirty:
            self.render_now()

    def _decorate(self) -> None:
        """Code blocks get a monospace font and a background; inline code a background too."""
        c = theme.colors()
        doc = self.document()
        code_bg = QColor(c["code"])
        mono = mono_font()
        block = doc.begin()
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        while block.isValid():
            bf = block.blockFormat()
            if bf.hasProperty(_CODE_FENCE) or bf.hasProperty(_CODE_LANG):
                fmt = QTextBlockFormat()
                fmt.setBackground(code_bg)
                fmt.setLeftMargin(6)
                cursor.setPosition(block.position())
                cursor.mergeBlockFormat(fmt)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                cf = QTextCharFormat()
                cf.setFont(mono)
                cf.setForeground(QColor(c["code_text"]))
                cursor.mergeCharFormat(cf)
            else:
                if bf.headingLevel():  # air above a heading, as in a document
                    heading = QTextBlockFormat()
                    heading.setTopMargin(12 if block.previous().isValid() else 2)
                    heading.setBottomMargin(4)
                    cursor.setPosition(block.position())
                    cursor.mergeBlockFormat(heading)
                it = block.begin()
                while not it.atEnd():
                    frag = it.fragment()
                    if frag.isValid() and frag.charFormat().fontFixedPitch():
                        cursor.setPosition(frag.position())
                        cursor.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                        cf = QTextCharFormat()
                        cf.setBackground(code_bg)
                        cf.setFont(mono)
                        cursor.mergeCharFormat(cf)
                    it += 1
            block = block.next()
        if self.muted:
            cursor.select(QTextCursor.SelectionType.Document)
            cf = QTextCharFormat()
            cf.setForeground(QColor(c["muted"]))
            cursor.mergeCharFormat(cf)
        cursor.endEditBlock()

    def _retheme(self, _name: str) -> None:
        if self.source:
            self.render_now()

    # -- size --

    def _fit(self, size: QSizeF) -> None:
        height = math.ceil(size.height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(max(height, 4))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit(self.document().size())
