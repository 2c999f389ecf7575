"""The pieces of a conversation: the person's inputs (a queued one with "Send now" / "Discard"), an assistant
message (text, collapsible reasoning, tool cards — one widget per part, indexed by part id, which is the part's
index in the persisted message), the per-turn footer with token usage, and the banner of an interrupted or
failed turn."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TypeAlias

from PySide6.QtCore import Qt, Signal, SignalInstance
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ..widgets.controls import Disclosure
from .markdown import MarkdownView
from .markdown_stream import StreamingMarkdown
from .tool_card import ToolCard

TEXT_KINDS = {"text_delta": "text", "reasoning_delta": "reasoning"}


class UserBubble(QWidget):
    """An input: its text (plain, as typed), attachments, or an answer to a question/approval. A queued input
    left over from an earlier run (`stranded`) offers "Send now" and "Discard"."""

    send_now = Signal()
    discard = Signal()
    edit = Signal()

    def __init__(self, parts: list[dict], status: str = "complete", stranded: bool = False,
                 editable: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.text = "".join(p.get("text", "") for p in parts if p.get("type") == "text")
        answer = next((p for p in parts if p.get("type") == "answer"), None)
        if answer is not None and not self.text:
            self.label = QLabel(_answer_line(answer))
            self.label.setObjectName("Muted")
            self.label.setWordWrap(True)  # a long typed answer; a short line keeps its width (resizeEvent)
            outer.addStretch(1)
            outer.addWidget(self.label)
            self.bubble = None
            return
        outer.addStretch(1)
        self.bubble = QFrame()
        self.bubble.setObjectName("UserBubble")
        lay = QVBoxLayout(self.bubble)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        if any(p.get("type") == "wake" for p in parts):  # sent by Hearth when the task woke, not typed
            woke = QLabel("Hearth woke the task")
            woke.setObjectName("Muted")
            lay.addWidget(woke)
        label = QLabel(self.text)
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.setVisible(bool(self.text))
        lay.addWidget(label)
        self.label = label
        names = [p.get("name", "") for p in parts if p.get("type") == "attachment"]
        if names:
            files = QLabel("Attached: " + ", ".join(names))
            files.setObjectName("Muted")
            files.setWordWrap(True)
            lay.addWidget(files)
        edited = any(p.get("type") == "edit" for p in parts)
        if edited or (editable and status == "complete"):
            row = QHBoxLayout()
            row.addStretch(1)
            if edited:
                mark = QLabel("edited")
                mark.setObjectName("Muted")
                row.addWidget(mark)
            if editable and status == "complete":
                row.addWidget(link_button("Edit", self.edit, "Change this message and send it again"))
            lay.addLayout(row)
        if status == "queued":
            row = QHBoxLayout()
            queued = QLabel("queued — not sent yet" if stranded else "queued — runs when the current turn ends")
            queued.setObjectName("Muted")
            row.addWidget(queued, 1)
            if stranded:
                for text, signal in (("Send now", self.send_now), ("Discard", self.discard)):
                    button = QPushButton(text)
                    button.setObjectName("Primary" if text == "Send now" else "")
                    button.clicked.connect(signal)
                    row.addWidget(button)
            lay.addLayout(row)
        outer.addWidget(self.bubble)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        widest = max(200, int(self.width() * 0.8))
        if self.bubble is not None:
            self.bubble.setMaximumWidth(widest)
            widest -= 24  # the bubble's margins
        # A word-wrapped QLabel would pick a narrow width by itself (an answer line broke after "You approved");
        # give it the text's natural width, up to the widest it may be.
        fm = self.label.fontMetrics()
        natural = max((fm.horizontalAdvance(line) for line in self.label.text().splitlines()), default=0) + 4
        self.label.setMinimumWidth(min(natural, widest))


def link_button(text: str, signal: SignalInstance | Callable[[], object], tip: str = "") -> QPushButton:
    button = QPushButton(text)
    button.setObjectName("Link")
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    button.setToolTip(tip)
    button.clicked.connect(signal)
    return button


def _answer_line(answer: dict) -> str:
    req = answer.get("request") or {}
    tool = req.get("tool_name") or "the tool"
    if req.get("kind") == "approval":
        return f"✓ You approved {tool}" if answer.get("answer") == "approve" else f"✗ You denied {tool}"
    return f"You answered: {answer.get('answer', '')}"


class ReasoningBlock(QWidget):
    """The model's reasoning, collapsed behind a toggle."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.toggle = Disclosure()
        self.toggle.setText("Thinking")
        self.toggle.toggled.connect(self._toggled)
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.view = MarkdownView(muted=True)
        self.view.hide()
        lay.addWidget(self.view)

    @property
    def markdown(self) -> str:
        return self.view.markdown

    def add_text(self, text: str) -> None:
        self.view.add_text(text)

    def set_text(self, text: str) -> None:
        self.view.set_text(text)

    def request_render(self) -> None:
        words = len(self.view.markdown.split())
        self.toggle.setText(f"Thinking · {words} word{'s' if words != 1 else ''}")
        if self.toggle.isChecked():
            self.view.request_render()

    def flush(self) -> None:
        self.request_render()
        if self.toggle.isChecked():
            self.view.flush()

    def _toggled(self, shown: bool) -> None:
        self.view.setVisible(shown)
        if shown:
            self.view.flush()


# What shows a text or reasoning part: the same text methods on each (`add_text`, `set_text`, `request_render`,
# `flush`, `markdown`).
TextPart: TypeAlias = MarkdownView | StreamingMarkdown | ReasoningBlock


class AssistantBlock(QWidget):
    """One assistant message; live events and persisted parts update it through the same methods."""

    settings_wanted = Signal(str)  # a warning's link: the Settings page that deals with it

    def __init__(self, parent: QWidget | None = None, live: bool = False):
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.lay.setSpacing(8)
        # A running turn's answer: its text parts stream (laid out in chunks, conversation/markdown_stream.py).
        self.live = live
        self.parts: dict[int, TextPart | ToolCard] = {}
        self._kinds: dict[int, str] = {}
        self._dirty: set[TextPart] = set()
        # Finds the card of a call made in an earlier message (an approval answered in a later turn): that card
        # is updated in place, this message shows no second one.
        self.foreign: Callable[[str], ToolCard | None] = lambda _call_id: None

    def _text_part(self, part_id: int, kind: str, live: bool = False) -> TextPart:
        w = self.parts.get(part_id)
        if w is not None and self._kinds[part_id] == kind and not isinstance(w, ToolCard):
            return w
        view: TextPart
        if kind == "text":
            view = StreamingMarkdown() if live else MarkdownView(cached=True)  # saved text: its render is kept
        else:
            view = ReasoningBlock()
        self._place(part_id, kind, view)
        return view

    def _tool_card(self, part_id: int, part: dict) -> ToolCard:
        w = self.parts.get(part_id)
        if isinstance(w, ToolCard):
            return w
        card = ToolCard(part)
        self._place(part_id, "tool_call", card)
        return card

    def _place(self, part_id: int, kind: str, w: TextPart | ToolCard) -> None:
        """`w` shows part `part_id` from now on, in its place among the parts, instead of what showed it."""
        old = self.parts.get(part_id)
        if old is not None:
            self.lay.removeWidget(old)
            old.deleteLater()
        self.parts[part_id] = w
        self._kinds[part_id] = kind
        index = sorted(self.parts).index(part_id)
        self.lay.insertWidget(index, w)

    def clear(self) -> None:
        for w in self.parts.values():
            self.lay.removeWidget(w)
            w.deleteLater()
        self.parts.clear()
        self._kinds.clear()
        self._dirty.clear()

    def add_delta(self, kind: str, part_id: int, text: str) -> None:
        w = self._text_part(part_id, kind, live=True)
        w.add_text(text)
        self._dirty.add(w)

    def update_tool(self, part: dict) -> None:
        foreign = self.foreign(part.get("call_id", ""))
        if foreign is not None:
            foreign.update_part(part)
            return
        self._tool_card(part["part_id"], part).update_part(part)

    def add_progress(self, call_id: str, line: str) -> None:
        card = self.card(call_id)
        if card is not None:
            card.add_progress(line)

    def set_parts(self, parts: list[dict]) -> None:
        """Reconcile with persisted parts; unchanged text is not re-rendered."""
        for i, p in enumerate(parts):
            kind = p.get("type")
            if kind in ("text", "reasoning"):
                w = self._text_part(i, kind, live=self.live)
                w.set_text(p.get("text", ""))
                self._dirty.add(w)
            elif kind == "tool_call":
                self.update_tool(dict(p, part_id=i))
        for i in [k for k in self.parts if k >= len(parts)]:
            gone = self.parts.pop(i)
            self._kinds.pop(i)
            if not isinstance(gone, ToolCard):  # a card is never waiting to re-render
                self._dirty.discard(gone)
            self.lay.removeWidget(gone)
            gone.deleteLater()
        self.flush()

    def render_changed(self) -> None:
        """Once per frame: re-render what changed (each view throttles itself by its own cost)."""
        dirty, self._dirty = self._dirty, set()
        for w in dirty:
            w.request_render()

    def flush(self) -> None:
        self._dirty.clear()
        for i in sorted(self.parts):
            w = self.parts[i]
            if not isinstance(w, ToolCard):
                w.flush()

    def add_warning(self, message: str, code: str | None = None) -> None:
        if code == "talk_only":  # the model can only talk: the way to one that can do what was asked
            self.lay.addWidget(Notice(message, "Open Settings ▸ Models", lambda: self.settings_wanted.emit("models")))
            return
        label = QLabel(f"⚠ {message}")
        label.setObjectName("Muted")
        label.setWordWrap(True)
        if code == "mcp_paused":  # the way to the difference and its Approve button
            label.setTextFormat(Qt.TextFormat.RichText)
            label.setText(f"⚠ {html.escape(message, quote=False)} <a href='permissions'>Review the change…</a>")
            label.linkActivated.connect(self.settings_wanted)
        self.lay.addWidget(label)

    def text(self, kind: str = "text") -> str:
        return "".join(self._texts(kind))

    def copy_text(self) -> str:
        """What "Copy" puts on the clipboard: the answer's text parts, as Markdown."""
        return "\n\n".join(self._texts("text"))

    def _texts(self, kind: str) -> list[str]:
        return [w.markdown for i, w in sorted(self.parts.items()) if self._kinds[i] == kind
                and not isinstance(w, ToolCard)]

    def cards(self) -> list[ToolCard]:
        return [w for _, w in sorted(self.parts.items()) if isinstance(w, ToolCard)]

    def card(self, call_id: str) -> ToolCard | None:
        return next((c for c in self.cards() if c.call_id == call_id), None)


class BannerFrame(QFrame):
    """A sentence in the conversation on a coloured band (the theme's QFrame#Banner, by `kind`), with what acts on
    it added to the right of it (`row`)."""

    def __init__(self, kind: str, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("Banner")
        self.setProperty("kind", kind)
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(12, 8, 8, 8)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.row.addWidget(self.label, 1)


class Banner(BannerFrame):
    """An interrupted or failed turn, said plainly, with the ways on: Continue (Retry for an answer cut off
    because it repeated itself, `kind` "repeating"), and for a failed one also Settings and another model in a
    new task (the task's own model is fixed). The button's `continue_clicked` means whichever it offers."""

    continue_clicked = Signal()
    settings_clicked = Signal()
    fork_clicked = Signal()

    def __init__(self, kind: str, text: str, can_continue: bool, parent: QWidget | None = None,
                 fork_label: str = "Continue in a new task with another model…"):
        super().__init__(kind, text, parent)
        self.kind = kind
        buttons = QVBoxLayout()
        self.button = QPushButton("Retry" if kind == "repeating" else "Continue")
        self.button.setObjectName("Primary")
        self.button.clicked.connect(self.continue_clicked)
        self.button.setVisible(can_continue)
        buttons.addWidget(self.button)
        self.extra: dict[str, QPushButton] = {}
        if kind == "error":
            for label, signal in (("Open Settings", self.settings_clicked),
                                  (fork_label, self.fork_clicked)):
                button = link_button(label, signal)
                buttons.addWidget(button)
                self.extra[label] = button
        self.row.addLayout(buttons)


class Notice(BannerFrame):
    """A sentence for the person under an answer, with the one button that acts on it."""

    def __init__(self, text: str, action: str, on_click: Callable[[], object], parent: QWidget | None = None):
        super().__init__("notice", text, parent)
        self.button = QPushButton(action)
        self.button.clicked.connect(on_click)
        self.row.addWidget(self.button, 0, Qt.AlignmentFlag.AlignTop)


class EventLine(QLabel):
    """A line in a conversation that is no one's message: a chat's model changed from here on."""

    def __init__(self, parts: list[dict], parent: QWidget | None = None):
        part = parts[0] if parts else {}
        text = f"Model changed to {part.get('to')}" if part.get("type") == "model_changed" else "—"
        super().__init__(f"— {text} —", parent)
        self.setObjectName("Muted")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setToolTip(f"Earlier answers came from {part.get('from')}." if part.get("from") else "")


REPEATED = "stopped: the model was repeating itself"  # the footer of an answer cut off for repeating itself


def footer_text(reason: str | None, input_tokens: int, output_tokens: int, live: bool = False,
                waiting_now: bool = False, truncated: bool = False) -> str:
    """How the turn ended, and its tokens. `truncated`: the model hit its length limit (the turn completed,
    the answer did not)."""
    bits = []
    if live:
        bits.append("working…")
    elif reason == "waiting":
        bits.append("waiting for you" if waiting_now else "asked you")
    elif reason == "completed" and truncated:
        bits.append("cut off at the length limit")
    elif reason:
        bits.append({"completed": "done", "aborted": "stopped by you"}.get(reason, reason))
    if input_tokens or output_tokens:
        bits.append(f"{input_tokens:,} in · {output_tokens:,} out tokens")
    return "  ·  ".join(bits)
