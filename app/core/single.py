"""One app per data folder: a second launch hands its window request to the running one and exits.

The running app listens on a local socket named after its data folder. A new launch first tries to connect:
when someone answers, it asks them to show their window and quits before painting anything. (The runtime's
data-folder lock is the real guard; this only makes the second launch useful instead of an error page.)
"""

from __future__ import annotations

import hashlib
import logging
import os

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

log = logging.getLogger(__name__)
SHOW = b"show\n"


def server_name(home: str | None) -> str:
    """The socket name for a data folder. The folder is found by the runtime's rule (--home, $HEARTH_HOME, the
    platform's user data folder) without importing the runtime, which costs ~1 s before the first paint."""
    if home is None:
        home = os.environ.get("HEARTH_HOME")
    if home is None:
        import platformdirs

        home = platformdirs.user_data_dir("Hearth", appauthor=False)
    key = os.path.realpath(os.path.expanduser(home))
    return "hearth-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def hand_over(name: str, timeout_ms: int = 500) -> bool:
    """Ask a running instance to show its window; True when one did."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(SHOW)
    sock.flush()
    sock.waitForBytesWritten(timeout_ms)
    sock.disconnectFromServer()
    return True


class InstanceServer(QObject):
    """Listens for later launches; `show_requested` when one arrives."""

    show_requested = Signal()

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self._server = QLocalServer(self)
        QLocalServer.removeServer(name)  # a socket file left by a crash; a live owner would have answered
        if not self._server.listen(name):
            log.warning("single-instance socket unavailable: %s", self._server.errorString())
        self._server.newConnection.connect(self._accept)

    def _accept(self) -> None:
        while (sock := self._server.nextPendingConnection()) is not None:
            sock.readyRead.connect(lambda s=sock: self._read(s))
            sock.disconnected.connect(sock.deleteLater)

    def _read(self, sock: QLocalSocket) -> None:
        if sock.readAll().startsWith(SHOW):
            self.show_requested.emit()

    def close(self) -> None:
        self._server.close()
