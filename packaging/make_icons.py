"""Render the app icon (painted in code by app/widgets/icons.py) into the files installers need, under resources/icons:

    hicolor/SIZExSIZE/apps/hearth.png   the freedesktop icon theme sizes (the .deb and the tarball install these)
    hearth.ico                          Windows (the .exe and Inno Setup), PNG-compressed entries
    hearth.icns                         macOS (the .app), PNG entries

The files are committed, so a build needs no Qt image plugins; run this again after changing the icon:

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/make_icons.py
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

from PySide6.QtCore import QBuffer, QIODevice
from PySide6.QtWidgets import QApplication

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.widgets.icons import flame_pixmap  # noqa: E402

HICOLOR_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_TYPES = {b"icp4": 16, b"icp5": 32, b"icp6": 64, b"ic07": 128, b"ic08": 256, b"ic09": 512, b"ic10": 1024}


def png(size: int) -> bytes:
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    flame_pixmap(size).save(buf, "PNG")
    return bytes(buf.data())


def ico(images: dict[int, bytes]) -> bytes:
    """ICONDIR + one ICONDIRENTRY per size + the PNG data (a width/height byte of 0 means 256)."""
    head = struct.pack("<HHH", 0, 1, len(images))
    offset = len(head) + 16 * len(images)
    entries, blobs = b"", b""
    for size, data in images.items():
        entries += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(data), offset + len(blobs))
        blobs += data
    return head + entries + blobs


def icns(images: dict[bytes, bytes]) -> bytes:
    body = b"".join(kind + struct.pack(">I", 8 + len(data)) + data for kind, data in images.items())
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    _app = QApplication.instance() or QApplication([])
    out = ROOT / "resources" / "icons"
    for size in HICOLOR_SIZES:
        target = out / "hicolor" / f"{size}x{size}" / "apps" / "hearth.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(png(size))
    (out / "hearth.ico").write_bytes(ico({size: png(size) for size in ICO_SIZES}))
    (out / "hearth.icns").write_bytes(icns({kind: png(size) for kind, size in ICNS_TYPES.items()}))
    print(f"icons written to {out}")


if __name__ == "__main__":
    main()
