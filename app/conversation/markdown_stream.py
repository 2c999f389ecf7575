"""A text part while it streams: Markdown laid out in chunks, so that a frame costs what the answer's last
paragraphs cost, not what the whole answer costs (one render of a 30 KB answer takes ~20 ms, longer than a frame).

Each stretch of at least `CHUNK` characters that ends at a blank line outside a code fence is rendered once into
its own view and then left alone; only the tail after it is re-rendered as text arrives. A cut at such a line keeps
every chunk whole Markdown. What can differ from one render of the whole text (an ordered list that goes on across
a cut is laid out as two lists; a selection stops at a cut) lasts only while the answer streams: a finished answer
is shown again from its saved parts, by one view over the whole text.
"""

from __future__ import annotations

from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

from .markdown import FENCE, MarkdownView

CHUNK = 2000


def settle_point(text: str, start: int, chunk: int = CHUNK) -> int | None:
    """The end of the last blank line of `text[start:]` that lies outside a code fence and at least `chunk`
    characters after `start` (which must itself be outside a fence), or None."""
    if len(text) - start < chunk:
        return None
    cut = None
    fence: str | None = None
    pos = start
    while True:
        end = text.find("\n", pos)
        if end < 0:
            return cut  # the last line is still being written
        line = text[pos:end]
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and m and m.group(1).startswith(fence[0]) and len(m.group(1)) >= len(fence) \
                and not m.group(2).strip():
            fence = None
        elif fence is None and not line.strip() and end + 1 - start >= chunk:
            cut = end + 1
        pos = end + 1


class StreamingMarkdown(QWidget):
    """The live counterpart of `MarkdownView`, with the same text methods (`add_text`, `set_text`,
    `request_render`, `flush`, `markdown`)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.lay.setSpacing(self.fontMetrics().height() // 2)  # about the gap between two paragraphs
        self.markdown = ""
        self._settled = 0  # how much of `markdown` the views before the tail show
        self.views: list[MarkdownView] = []
        self.tail = self._new_view()

    @property
    def renders(self) -> int:
        return sum(v.renders for v in self.views)

    def _new_view(self) -> MarkdownView:
        view = MarkdownView()
        self.views.append(view)
        self.lay.addWidget(view)
        return view

    def add_text(self, text: str) -> None:
        if text:
            self.markdown += text
            self.tail.add_text(text)

    def set_text(self, text: str) -> None:
        """The text so far at once (a running answer re-made from its parts): laid out again from its start,
        its settled part as one chunk at the next render."""
        if text == self.markdown:
            return
        for view in self.views[:-1]:
            self.lay.removeWidget(view)
            view.deleteLater()
        self.views = [self.tail]
        self.markdown, self._settled = text, 0
        self.tail.set_text(text)

    def request_render(self) -> None:
        self._settle()
        self.tail.request_render()

    def flush(self) -> None:
        self._settle()
        self.tail.flush()

    def _settle(self) -> None:
        cut = settle_point(self.markdown, self._settled)
        if cut is None:
            return
        done = self.tail
        done.set_text(self.markdown[self._settled:cut].rstrip("\n"))
        done.render_now()
        self._settled = cut
        self.tail = self._new_view()
        self.tail.set_text(self.markdown[cut:])
