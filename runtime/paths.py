"""Where the data folder is: `--home`, else `$HEARTH_HOME`, else the platform's user data folder.

Cheap to import (no runtime module, platformdirs only when needed): the app reads its preferences from the
data folder before the first paint, long before it imports `runtime.api`.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_folder(home: str | os.PathLike | None = None) -> Path:
    """The data folder's path, not created."""
    if home is None:
        home = os.environ.get("HEARTH_HOME")
    if home is None:
        import platformdirs

        home = platformdirs.user_data_dir("Hearth", appauthor=False)
    return Path(home).expanduser()
