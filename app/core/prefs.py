"""App-only preferences (theme, Enter-sends, one-time notes, window geometry, unsent drafts). They are about
this viewer, not the agent, so they live in a QSettings INI file, `app.ini` in the data folder, and never in
settings.json. Being in the data folder, they go with it (a backup, a move, an uninstall that deletes it);
earlier versions kept them in Qt's per-user location when the data folder was the default, and the first start
with the default folder copies them from there."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings


class Prefs:
    def __init__(self, path: Path, *, carried_from: QSettings | None = None):
        """`carried_from`: where older versions kept them, copied over once when `path` does not exist yet."""
        fresh = not path.exists()
        self._s = QSettings(str(path), QSettings.Format.IniFormat)
        if fresh and carried_from is not None and carried_from.allKeys():
            for key in carried_from.allKeys():
                self._s.setValue(key, carried_from.value(key))
            self._s.sync()

    def _get(self, key: str, default):
        value = self._s.value(key, default)
        if isinstance(default, bool):
            return value in (True, "true", "1", 1)
        return value

    def _set(self, key: str, value) -> None:
        # No sync() here: it writes the file synchronously (25 ms measured when opening a task); Qt writes it
        # from the event loop and on exit.
        self._s.setValue(key, value)

    def save(self) -> None:
        self._s.sync()

    @property
    def theme(self) -> str:
        value = str(self._get("theme", "system"))
        return value if value in ("system", "light", "dark") else "system"

    @theme.setter
    def theme(self, value: str) -> None:
        self._set("theme", value)

    @property
    def enter_sends(self) -> bool:
        return self._get("enter_sends", True)

    @enter_sends.setter
    def enter_sends(self, value: bool) -> None:
        self._set("enter_sends", bool(value))

    @property
    def tray_note_shown(self) -> bool:
        return self._get("tray_note_shown", False)

    @tray_note_shown.setter
    def tray_note_shown(self, value: bool) -> None:
        self._set("tray_note_shown", bool(value))

    @property
    def geometry(self) -> QByteArray | None:
        value = self._s.value("geometry")
        return value if isinstance(value, QByteArray) else None

    @geometry.setter
    def geometry(self, value: QByteArray) -> None:
        self._set("geometry", value)

    @property
    def last_task(self) -> str | None:
        value = self._s.value("last_task")
        return str(value) if value else None

    @last_task.setter
    def last_task(self, value: str | None) -> None:
        self._set("last_task", value or "")

    @property
    def server(self) -> str:
        """The address of the Hearth server connected to last (never its token: that is in the keyring)."""
        return str(self._s.value("server", "") or "")

    @server.setter
    def server(self, value: str) -> None:
        self._set("server", value)

    @property
    def drafts(self) -> dict[str, dict]:
        """What was typed and attached but not sent, per task or chat id (see Composer.draft)."""
        try:
            value = json.loads(str(self._s.value("drafts", "{}")))
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @drafts.setter
    def drafts(self, value: dict[str, dict]) -> None:
        self._set("drafts", json.dumps(value))
