"""Markdown rendering for assistant text: Qt's own Markdown importer (GitHub dialect), Pygments for fenced code
blocks (each gets a "Copy code" link above it), and a browser that grows to fit its document instead of
scrolling.

`MarkdownView.markdown` is the exact text it shows (tests compare it with the persisted text). While a part
streams, rendering is throttled by its own cost (a re-render never takes more than about a quarter of the
time), so a 100 KB answer stays responsive; the final text is always rendered.

A saved message's rendered document is kept (`cached=True`, the last RENDERED_KEEP of them): the conversation
drops the widgets of messages far off screen, and scrolling back to one copies its document (~7 ms for 5 KB
with code) instead of rendering it again (~21 ms).
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict

from pygments.lexers import get_lexer_by_name
from pygments.token import Token
from pygments.util import ClassNotFound
from PySide6.QtCore import QObject, QSizeF, Qt, QTimer, QUrl
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QFontMetricsF,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QApplication, QFrame, QSizePolicy, QTextBrowser, QWidget

from ..widgets import theme

_CODE_LANG = QTextFormat.Property.BlockCodeLanguage
_CODE_FENCE = QTextFormat.Property.BlockCodeFence

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
RENDERED_KEEP = 200
# (text, theme, muted) -> the rendered document and its code blocks, the most recently shown last.
_rendered: OrderedDict[tuple[str, str, bool], tuple[QTextDocument, list[str]]] = OrderedDict()
_kept_by: list[QObject] = []


def _keeper() -> QObject:
    """The parent of the kept documents. PySide6 ties the object `clone()` returns to the document it was
    cloned from (also with a parent argument), so a kept clone died with the view it came from: each clone is
    given its owner with setParent, which moves that tie."""
    if not _kept_by:
        _kept_by.append(QObject())
    return _kept_by[0]


def with_copy_links(source: str) -> tuple[str, list[str]]:
    """The Markdown to render, with a "Copy code" link line before each fenced code block, and each block's
    code (exactly as written, what the link copies)."""
    out: list[str] = []
    blocks: list[str] = []
    fence: str | None = None
    code: list[str] = []
    for line in source.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(f"[Copy code](copy:{len(blocks)})")
            out.append("")
            blocks.append("")
            code = []
        elif fence is not None and m and m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence) \
                and not m.group(2).strip():
            fence = None
            blocks[-1] = "\n".join(code)
        elif fence is not None:
            code.append(line)
            blocks[-1] = "\n".join(code)
        out.append(line)
    return "\n".join(out), blocks


def _leading_tabs_expanded(line: str) -> str:
    body = line.lstrip(" \t")
    return line[:len(line) - len(body)].expandtabs(4) + body


def keep_code_tabs(doc: QTextDocument, code_blocks: list[str]) -> None:
    """Put back the tabs that Qt's Markdown importer turns into spaces at the start of fenced code lines (a
    Makefile's recipe lines, Go code): code on screen, and a selection copied from it, reads as it was written.
    A code block is only touched where its lines differ from `code_blocks` by exactly that expansion."""
    if not any("\t" in code for code in code_blocks):
        return  # most answers: no pass over the document
    cursor = QTextCursor(doc)
    cursor.beginEditBlock()
    unmatched = list(code_blocks)
    block = doc.begin()
    while block.isValid():
        if not block.blockFormat().hasProperty(_CODE_FENCE):
            block = block.next()
            continue
        group = [block]
        while group[-1].next().isValid() and group[-1].next().blockFormat().hasProperty(_CODE_FENCE):
            group.append(group[-1].next())
        shown = [b.text() for b in group]
        for i, code in enumerate(unmatched):
            lines = code.split("\n")
            if len(lines) == len(shown) and all(s in (line, _leading_tabs_expanded(line))
                                                for s, line in zip(shown, lines, strict=True)):
                for b, line in zip(group, lines, strict=True):
                    if b.text() != line:
                        cursor.setPosition(b.position())
                        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                        cursor.insertText(line)
                del unmatched[:i + 1]
                break
        block = group[-1].next()
    cursor.endEditBlock()


def mono_font() -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    return font


# Pygments token families -> theme colour names.
_TOKEN_COLORS = (
    (Token.Comment, "comment"), (Token.Literal.String, "str"), (Token.Literal.Number, "num"),
    (Token.Keyword, "kw"), (Token.Name.Function, "fn"), (Token.Name.Class, "fn"), (Token.Name.Builtin, "fn"),
)


def _color_of(token) -> str | None:
    for family, name in _TOKEN_COLORS:
        if token in family:
            return name
    return None


def highlight_spans(code: str, lang: str) -> list[tuple[int, int, str, bool]]:
    """(start, length, colour name, italic) spans of `code` in language `lang`, by Pygments; none for an
    unknown language (we never guess: a wrong guess paints prose as code)."""
    try:
        lexer = get_lexer_by_name(lang.strip().lower(), stripnl=False, ensurenl=False) if lang.strip() else None
    except ClassNotFound:
        lexer = None
    if lexer is None:
        return []
    spans, pos = [], 0
    for token, value in lexer.get_tokens(code):
        color = _color_of(token)
        if color is not None and value:
            spans.append((pos, len(value), color, token in Token.Comment))
        pos += len(value)
    return spans


class MarkdownView(QTextBrowser):
    """A read-only Markdown block that grows with its content."""

    def __init__(self, text: str = "", *, muted: bool = False, cached: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.cached = cached  # shows saved text: its render is kept and reused (module docstring)
        self.setOpenLinks(False)  # links are handled below: "copy:N" copies code block N
        self.anchorClicked.connect(self._link)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setTabStopDistance(QFontMetricsF(mono_font()).horizontalAdvance(" ") * 4)  # tabs kept in code
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.viewport().setAutoFillBackground(False)
        self.muted = muted
        self.markdown = text
        self.renders = 0
        self._dirty = bool(text)
        self._next_ok = 0.0
        self._timer: QTimer | None = None
        self.code_blocks: list[str] = []
        self._follow_size()
        theme.notifier.changed.connect(self._retheme)
        self.setFixedHeight(4)
        if text:
            self.render_now()

    # -- content --

    def add_text(self, text: str) -> None:
        if text:
            self.markdown += text
            self._dirty = True

    def set_text(self, text: str) -> None:
        if text != self.markdown:
            self.markdown = text
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
        key = (self.markdown, "dark" if theme.is_dark() else "light", self.muted)
        if self.cached and (kept := _rendered.get(key)) is not None:
            _rendered.move_to_end(key)
            copy = kept[0].clone()
            copy.setParent(self)  # owned by this view (see _keeper)
            self.setDocument(copy)
            self._follow_size()
            self.code_blocks = list(kept[1])
            return
        doc = self.document()
        linked, self.code_blocks = with_copy_links(self.markdown)
        doc.setMarkdown(linked)
        keep_code_tabs(doc, self.code_blocks)
        self._decorate()
        self.renders += 1
        if self.cached:
            stored = doc.clone()
            stored.setParent(_keeper())
            _rendered[key] = (stored, list(self.code_blocks))
            if len(_rendered) > RENDERED_KEEP:
                _rendered.popitem(last=False)[1][0].deleteLater()
        cost = time.perf_counter() - t0
        # Spend at most ~25% of the time re-rendering a long streaming part.
        self._next_ok = time.perf_counter() + (3 * cost if cost > 0.004 else 0.0)
        if self._timer is not None:
            self._timer.stop()

    def flush(self) -> None:
        if self._dirty:
            self.render_now()

    def _decorate(self) -> None:
        """Code blocks get a monospace font, a background, Pygments colours and wrapped long lines; inline code a
        background; the "Copy code" links sit small and right-aligned above their block."""
        c = theme.colors()
        doc = self.document()
        code_bg = QColor(c["code"])
        mono = mono_font()
        cursor = QTextCursor(doc)
        cursor.beginEditBlock()
        group: list = []  # consecutive blocks of one code block
        block = doc.begin()
        while block.isValid():
            bf = block.blockFormat()
            if bf.hasProperty(_CODE_FENCE) or bf.hasProperty(_CODE_LANG):
                group.append(block)
                fmt = QTextBlockFormat()
                fmt.setBackground(code_bg)
                fmt.setLeftMargin(6)
                # Qt's importer makes code lines unbreakable: in a view that grows down, not sideways, a long line
                # ran past the right edge, clipped and unreachable. They wrap (copying still gives the one line).
                fmt.setNonBreakableLines(False)
                cursor.setPosition(block.position())
                cursor.mergeBlockFormat(fmt)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                cf = QTextCharFormat()
                cf.setFont(mono)
                cf.setForeground(QColor(c["code_text"]))
                cursor.mergeCharFormat(cf)
            else:
                self._highlight(cursor, group, c)
                group = []
                if bf.headingLevel():  # air above a heading, as in a document
                    heading = QTextBlockFormat()
                    heading.setTopMargin(12 if block.previous().isValid() else 2)
                    heading.setBottomMargin(4)
                    cursor.setPosition(block.position())
                    cursor.mergeBlockFormat(heading)
                if block.text() == "Copy code":
                    link = QTextBlockFormat()
                    link.setAlignment(Qt.AlignmentFlag.AlignRight)
                    link.setBottomMargin(0)
                    cursor.setPosition(block.position())
                    cursor.mergeBlockFormat(link)
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
        self._highlight(cursor, group, c)
        if self.muted:
            cursor.select(QTextCursor.SelectionType.Document)
            cf = QTextCharFormat()
            cf.setForeground(QColor(c["muted"]))
            cursor.mergeCharFormat(cf)
        cursor.endEditBlock()

    @staticmethod
    def _highlight(cursor: QTextCursor, group: list, c: dict) -> None:
        """Colour one code block (its lines are consecutive blocks; a line break is one position)."""
        if not group:
            return
        lang = str(group[0].blockFormat().property(_CODE_LANG) or "")
        start = group[0].position()
        for offset, length, color, italic in highlight_spans("\n".join(b.text() for b in group), lang):
            cursor.setPosition(start + offset)
            cursor.setPosition(start + offset + length, QTextCursor.MoveMode.KeepAnchor)
            cf = QTextCharFormat()
            cf.setForeground(QColor(c[color]))
            if italic:
                cf.setFontItalic(True)
            cursor.mergeCharFormat(cf)

    def _link(self, url: QUrl) -> None:
        if url.scheme() == "copy":
            index = int(url.path() or 0)
            if 0 <= index < len(self.code_blocks):
                QApplication.clipboard().setText(self.code_blocks[index])
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def _retheme(self, _name: str) -> None:
        if self.markdown:
            self.render_now()

    # -- size --

    def _follow_size(self) -> None:
        self.document().setDocumentMargin(1)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit(self.document().size())

    def _fit(self, size: QSizeF) -> None:
        height = math.ceil(size.height()) + 2 * self.frameWidth()
        if height != self.height():
            self.setFixedHeight(max(height, 4))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit(self.document().size())
