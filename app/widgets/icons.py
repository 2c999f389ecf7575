"""The app icon, painted in code so it needs no resource files (and no SVG plugin) in any packaging."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPixmap


def flame_pixmap(size: int, badge: QColor | None = None) -> QPixmap:
    """The flame at `size` pixels, drawn natively at that size (also for the installers' icon files)."""
    pm = QPixmap(size, size)
    pm.fill(Qt.GlobalColor.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = size / 64.0
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#c8561f"))
    p.drawRoundedRect(QRectF(2 * s, 2 * s, 60 * s, 60 * s), 14 * s, 14 * s)
    outer = QPainterPath(QPointF(32 * s, 8 * s))
    outer.cubicTo(QPointF(44 * s, 22 * s), QPointF(50 * s, 32 * s), QPointF(48 * s, 41 * s))
    outer.cubicTo(QPointF(46 * s, 52 * s), QPointF(38 * s, 57 * s), QPointF(32 * s, 57 * s))
    outer.cubicTo(QPointF(24 * s, 57 * s), QPointF(16 * s, 51 * s), QPointF(16 * s, 41 * s))
    outer.cubicTo(QPointF(16 * s, 32 * s), QPointF(22 * s, 27 * s), QPointF(25 * s, 22 * s))
    outer.cubicTo(QPointF(26 * s, 28 * s), QPointF(28 * s, 31 * s), QPointF(31 * s, 32 * s))
    outer.cubicTo(QPointF(30 * s, 24 * s), QPointF(29 * s, 16 * s), QPointF(32 * s, 8 * s))
    p.setBrush(QColor("#fff3e6"))
    p.drawPath(outer)
    inner = QPainterPath(QPointF(32 * s, 33 * s))
    inner.cubicTo(QPointF(38 * s, 39 * s), QPointF(40 * s, 44 * s), QPointF(38 * s, 49 * s))
    inner.cubicTo(QPointF(36 * s, 53 * s), QPointF(28 * s, 53 * s), QPointF(26 * s, 49 * s))
    inner.cubicTo(QPointF(24 * s, 44 * s), QPointF(28 * s, 39 * s), QPointF(32 * s, 33 * s))
    p.setBrush(QColor("#f0a050"))
    p.drawPath(inner)
    if badge is not None:
        p.setBrush(badge)
        p.setPen(QColor("#ffffff"))
        p.drawEllipse(QRectF(42 * s, 42 * s, 20 * s, 20 * s))
    p.end()
    return pm


def app_icon(badge: str | None = None) -> QIcon:
    """The flame; with `badge` (a colour) a dot marks running or waiting tasks in the tray."""
    icon = QIcon()
    for size in (16, 22, 32, 48, 64, 128, 256):
        icon.addPixmap(flame_pixmap(size, QColor(badge) if badge else None))
    return icon
