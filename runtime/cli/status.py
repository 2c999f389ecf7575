"""The status line `hearth run` and `hearth chat` show on a terminal while a step waits ("Loading model…",
"Reading your message… 40%", "Waiting for the server…"): one stderr line, rewritten in place and erased before
anything else is printed. Only on a terminal: a script reading stderr gets no status lines."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from ..events import Event

ERASE = "\r\033[K"
# Asked once, when the CLI is imported. `hearth run` then starts loading the model, and while llama-cpp-python
# loads one (verbose=False) it swaps `sys.stderr` for a /dev/null file and points descriptor 2 there: asked later,
# there may be no terminal, and a `sys.stderr` kept from then writes to /dev/null for good. So the stream is
# looked up at each write.
STDERR_IS_TERMINAL = sys.stderr.isatty()


class StatusLine:
    def __init__(self, stream: TextIO | None = None):
        self._own_stream = stream
        self._on = stream.isatty() if stream is not None else STDERR_IS_TERMINAL
        self._shown = False
        self._mid_line = False  # the answer's text so far does not end with a newline

    def _stream(self) -> TextIO:
        return self._own_stream or sys.stderr

    def event(self, ev: Event) -> None:
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
            self._stream().write("\n")
            self._mid_line = False
        self._stream().write(f"{ERASE}{text}")
        self._stream().flush()
        self._shown = True

    def _erase(self) -> None:
        if self._shown:
            self._stream().write(ERASE)
            self._stream().flush()
            self._shown = False
