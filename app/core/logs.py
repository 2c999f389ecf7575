"""The app's log: INFO and up to a rotating file, warnings (everything with --verbose) to stderr.

The file is `hearth.log` in the platform's user log folder (platformdirs), or in `logs/` inside the data folder
when one is given with --home or $HEARTH_HOME, so a test's or a second profile's log stays with its data.
No key reaches it: `Runtime.open` makes every record of the process redacted (runtime/redact.py), before the
runtime knows any key; the app cannot install that here without loading the runtime before its first paint.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

LOG_FILE = "hearth.log"
LOG_BYTES = 1_000_000
LOG_BACKUPS = 3  # at most 4 MB of logs

log = logging.getLogger("app")


def log_folder(home: str | Path | None) -> Path:
    """`logs/` in an explicit data folder (a test's or a second profile's logs stay with its data), else the
    platform's user log folder."""
    home = home or os.environ.get("HEARTH_HOME")
    if home:
        return Path(home) / "logs"
    import platformdirs

    return Path(platformdirs.user_log_dir("Hearth", appauthor=False))


def setup_logging(verbose: bool, home: str | Path | None) -> Path | None:
    """Log to a rotating file (None when it cannot be written: then stderr only) and to stderr, if there is one
    (a windowed program on Windows has none)."""
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    if sys.stderr is not None:
        console = logging.StreamHandler()
        console.setLevel(logging.INFO if verbose else logging.WARNING)
        console.setFormatter(fmt)
        root.addHandler(console)
    # Uncaught exceptions in Qt slots reach sys.excepthook; a windowed program has no console to print them on.
    sys.excepthook = lambda *exc: log.critical("uncaught exception", exc_info=exc)
    path = log_folder(home) / LOG_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS,
                                                       encoding="utf-8")
    except OSError as exc:
        log.warning("cannot write the log file %s: %s", path, exc)
        return None
    handler.setFormatter(fmt)
    root.addHandler(handler)
    return path
