"""Light and dark themes: a Fusion palette plus one stylesheet keyed by object names.

"system" follows the platform's colour scheme when Qt knows it (Qt 6.5+ style hints), else light.
Widgets that paint colours themselves (code blocks, badges) read `colors()` and listen to `notifier.changed`.
"""

from __future__ import annotations

from typing import TypedDict

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

LIGHT = {
    "window": "#f6f5f3", "base": "#ffffff", "text": "#1f2328", "muted": "#6b6f76", "border": "#e0ddd8",
    "sidebar": "#eeebe6", "selected": "#e3ddd5", "hover": "#e8e4de", "accent": "#c8561f", "accent_text": "#ffffff",
    "user": "#f8ebe2", "card": "#fbfaf8", "code": "#f2f0ec", "code_text": "#24292f",
    "kw": "#a626a4", "str": "#3f7f2f", "comment": "#8a8f98", "num": "#b45f06", "fn": "#2f5fb3",
    "running": "#2f7de1", "waiting": "#c98a00", "interrupted": "#d2691e", "error": "#cf3a3a",
    "idle": "#8c8f94", "done": "#2e8b57", "banner": "#fff4e0", "banner_error": "#fdeaea",
}
DARK = {
    "window": "#1c1b1a", "base": "#242322", "text": "#e8e6e3", "muted": "#9c978f", "border": "#3b3936",
    "sidebar": "#201f1d", "selected": "#34302c", "hover": "#2a2826", "accent": "#f08a4b", "accent_text": "#1c1b1a",
    "user": "#3a2d25", "card": "#292826", "code": "#2f2d2a", "code_text": "#e6e1da",
    "kw": "#d49bf0", "str": "#9fd08a", "comment": "#8d8a84", "num": "#f0b070", "fn": "#8ab4f8",
    "running": "#5aa2ff", "waiting": "#e8b339", "interrupted": "#f0934a", "error": "#ff6b6b",
    "idle": "#8d8a84", "done": "#5cc48a", "banner": "#3a3020", "banner_error": "#3d2323",
}


class _Notifier(QObject):
    changed = Signal(str)


class _Theme(TypedDict):
    name: str
    colors: dict[str, str]


notifier = _Notifier()
_current: _Theme = {"name": "light", "colors": LIGHT}


def colors() -> dict[str, str]:
    return _current["colors"]


def is_dark() -> bool:
    return _current["name"] == "dark"


def resolve(mode: str) -> str:
    if mode in ("light", "dark"):
        return mode
    hints = QApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None and scheme() == Qt.ColorScheme.Dark:
        return "dark"
    return "light"


def _palette(c: dict[str, str]) -> QPalette:
    p = QPalette()
    roles = {
        QPalette.ColorRole.Window: c["window"], QPalette.ColorRole.WindowText: c["text"],
        QPalette.ColorRole.Base: c["base"], QPalette.ColorRole.AlternateBase: c["card"],
        QPalette.ColorRole.Text: c["text"], QPalette.ColorRole.Button: c["base"],
        QPalette.ColorRole.ButtonText: c["text"], QPalette.ColorRole.Highlight: c["accent"],
        QPalette.ColorRole.HighlightedText: c["accent_text"], QPalette.ColorRole.ToolTipBase: c["base"],
        QPalette.ColorRole.ToolTipText: c["text"], QPalette.ColorRole.PlaceholderText: c["muted"],
        QPalette.ColorRole.Link: c["accent"], QPalette.ColorRole.Mid: c["border"],
    }
    for role, value in roles.items():
        p.setColor(role, QColor(value))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(c["muted"]))
    return p


def stylesheet(c: dict[str, str]) -> str:
    return f"""
    QWidget#Sidebar {{ background: {c['sidebar']}; }}
    QListView#TaskList {{ background: transparent; border: none; outline: none; }}
    QLabel#TaskTitle {{ font-weight: 600; }}
    QLabel#Muted, QLabel#TaskMeta, QLabel#Footer {{ color: {c['muted']}; }}
    QLabel#Warning {{ color: {c['interrupted']}; font-weight: 600; }}
    QLabel#PanelTitle {{ font-size: 16px; font-weight: 600; }}
    QLabel#Chip {{ color: {c['muted']}; border: 1px solid {c['border']}; border-radius: 9px; padding: 1px 8px; }}
    QScrollArea#Conversation, QWidget#ConversationBody {{ background: {c['base']}; border: none; }}
    QFrame#UserBubble {{ background: {c['user']}; border-radius: 12px; }}
    QFrame#ToolCard {{ background: {c['card']}; border: 1px solid {c['border']}; border-radius: 8px; }}
    QFrame#WaitingBox {{ background: {c['card']}; border: 2px solid {c['waiting']}; border-radius: 10px; }}
    QFrame#Banner {{ background: {c['banner']}; border-radius: 8px; }}
    QFrame#Banner[kind="error"] {{ background: {c['banner_error']}; }}
    QFrame#Composer {{ background: {c['base']}; border: 1px solid {c['border']}; border-radius: 12px; }}
    QPlainTextEdit#ComposerEdit {{ background: transparent; border: none; }}
    QFrame#AttachmentChip {{ background: {c['code']}; border-radius: 10px; }}
    QPushButton {{ padding: 5px 12px; border-radius: 6px; border: 1px solid {c['border']}; background: {c['base']}; }}
    QPushButton:hover {{ border-color: {c['accent']}; }}
    QPushButton:disabled {{ color: {c['muted']}; }}
    QPushButton#Primary {{ background: {c['accent']}; color: {c['accent_text']}; border: none; font-weight: 600; }}
    QPushButton#Primary:disabled {{ background: {c['border']}; color: {c['muted']}; }}
    QPushButton#Danger {{ color: {c['error']}; }}
    QToolButton#Toggle {{ border: none; color: {c['muted']}; padding: 2px 0; }}
    QToolButton#Toggle:hover {{ color: {c['text']}; }}
    QPushButton#CitationChip {{ color: {c['accent']}; background: {c['code']}; border: none; border-radius: 10px;
        padding: 2px 10px; }}
    QPushButton#CitationChip:hover {{ text-decoration: underline; }}
    QPushButton#Link {{ border: none; color: {c['accent']}; padding: 0; text-align: left; background: transparent; }}
    QLabel#Phase {{ color: {c['muted']}; }}
    QLabel#Welcome {{ font-size: 22px; font-weight: 600; }}
    QTextBrowser {{ background: transparent; border: none; }}
    QPlainTextEdit#Result {{ background: {c['code']}; border: none; border-radius: 6px; }}
    QListWidget#Providers::item {{ padding: 5px 4px; }}
    QSplitter::handle {{ background: {c['border']}; width: 1px; }}
    QWidget#TaskPanel, QWidget#PanelHead, QWidget#PanelBottom {{ background: {c['base']}; }}
    QWidget#PanelHead {{ border-bottom: 1px solid {c['border']}; }}
    """


def apply(mode: str) -> str:
    """Apply a theme mode ("system", "light", "dark"); returns the resolved "light"/"dark"."""
    app = QApplication.instance()
    assert isinstance(app, QApplication), "a theme is applied to the running application"
    name = resolve(mode)
    c = DARK if name == "dark" else LIGHT
    _current.update({"name": name, "colors": c})
    app.setStyle("Fusion")
    app.setPalette(_palette(c))
    app.setStyleSheet(stylesheet(c))
    notifier.changed.emit(name)
    return name
