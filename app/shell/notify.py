"""Desktop notifications that work with or without a tray: through the desktop's own notification service
(`desktop-notifier`: D-Bus on Linux, the platform APIs elsewhere), else the tray's balloon, else only the log.

Sending never blocks and never fails loudly: a machine without a notification service just gets none."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.util import spawn

if TYPE_CHECKING:
    from desktop_notifier import DesktopNotifier

log = logging.getLogger(__name__)
# Without a notification service the library logs a traceback per attempt; we say it once, in a sentence.
logging.getLogger("desktop_notifier").setLevel(logging.CRITICAL)


class Notifier:
    def __init__(self, app_name: str = "Hearth", fallback: Callable[[str, str], None] | None = None):
        self._app_name = app_name
        self._fallback = fallback
        self._desktop: DesktopNotifier | None = None  # created on first use: importing it costs start-up time
        self._broken = False

    def send(self, title: str, text: str, on_clicked: Callable[[], None] | None = None) -> None:
        spawn(self._send(title, text, on_clicked))

    async def _send(self, title: str, text: str, on_clicked: Callable[[], None] | None) -> None:
        if not self._broken:
            try:
                if self._desktop is None:
                    from desktop_notifier import DesktopNotifier

                    self._desktop = DesktopNotifier(app_name=self._app_name)
                await self._desktop.send(title=title, message=text, on_clicked=on_clicked)
                return
            except Exception as exc:  # no session bus, no service: say so once, then use the fallback
                log.info("desktop notifications are unavailable (%s); using %s", exc,
                         "the tray" if self._fallback else "nothing")
                self._broken = True
        if self._fallback is not None:
            self._fallback(title, text)
