"""The status line `hearth run` and `hearth chat` show on a terminal while a step waits ("Loading model…",
"Reading your message… 40%", "Waiting for the server…"): one stderr line, rewritten in place and erased before
anything else is printed. Only on a terminal: a script reading stderr gets no status lines."""

from __future__ import annotations

import sys
from typing import TextIO

ERASE = "\r\033[K"


class StatusLine:
    def __init__(self, stream: TextIO | None = None):
        self._stream = stream or sys.stderr
        self._on = self._stream.isatty()
        self._shown = False
        self._mid_line = False  # the answer's text so far does not end with a newline

    def event(self, ev) -> None:
        """Call before printing each event: shows a status's words, erases them before anything else."""
        if ev.type == "status" and ev.detail:
            self._show(ev.detail)
        else:
            self._erase()

    def printed(self, text: str) -> None:
        """Call with what was just printed (to stdout or stderr): whether the cursor is left mid-line."""
        if text:
            self._mid_line = not text.endswith("\n")

    def _show(self, text: str) -> None:
        if not self._on:
            return
        if self._mid_line:  # keep the answer's last line: the status goes below it
            self._stream.write("\n")
            self._mid_line = False
        self._stream.write(f"{ERASE}{text}")
        self._stream.flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self._stream.write(ERASE)
            self._stream.flush()
            self._shown = False
