"""A system keyring for tests' child processes: keyring's backend API over a JSON file named by
$HEARTH_TEST_KEYRING, chosen with PYTHON_KEYRING_BACKEND=tests.support.keyring_file.FileKeyring. The real ones (the
Secret Service, KWallet) need a desktop session with an unlocked keyring, which a test machine does not have; this
one lets a test read what was kept, and where."""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.compat import properties
from keyring.errors import PasswordDeleteError

ENV = "HEARTH_TEST_KEYRING"
BACKEND = "tests.support.keyring_file.FileKeyring"


def read(path: Path) -> dict[str, str]:
    """What the keyring file at `path` holds: "service/username" to password."""
    return json.loads(path.read_text()) if path.exists() else {}


class FileKeyring(KeyringBackend):
    @properties.classproperty
    def priority(cls) -> float:
        # keyring picks among every backend class imported: this one only where a test asked for it, never in the
        # test process that merely imports this module (its own keyring tests would read a file that is not set).
        if ENV not in os.environ:
            raise RuntimeError(f"${ENV} names no keyring file")
        return 1

    @property
    def _path(self) -> Path:
        return Path(os.environ[ENV])

    def get_password(self, service: str, username: str) -> str | None:
        return read(self._path).get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        self._path.write_text(json.dumps(read(self._path) | {f"{service}/{username}": password}))

    def delete_password(self, service: str, username: str) -> None:
        kept = read(self._path)
        if kept.pop(f"{service}/{username}", None) is None:
            raise PasswordDeleteError(username)
        self._path.write_text(json.dumps(kept))
