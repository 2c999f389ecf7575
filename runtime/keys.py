"""API keys: `keyring:NAME` (the OS keyring, what the app's Settings writes) or `env:NAME`.

A headless machine without a usable keyring backend falls back to a 0600 file in the data dir, and says
so once in the log. Keys are only read here and handed to providers; they are never written to
settings.json, SQLite, logs or exports, and never passed to tool or MCP child processes.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from . import redact
from .errors import ConfigError

log = logging.getLogger(__name__)
SERVICE = "hearth"
FALLBACK_FILE = "secrets.json"


def keyring_usable() -> bool:
    try:
        import keyring
        from keyring.backends import fail

        return not isinstance(keyring.get_keyring(), fail.Keyring)
    except Exception:
        return False


class SecretStore:
    """Looks for a keyring only when a key is first needed: most setups (local servers) never need one."""

    def __init__(self, home: Path):
        self._fallback = home / FALLBACK_FILE
        self._uses_keyring: bool | None = None

    @property
    def uses_keyring(self) -> bool:
        if self._uses_keyring is None:
            self._uses_keyring = keyring_usable()
            if not self._uses_keyring:
                log.warning(
                    "No OS keyring is available; API keys are kept in %s (readable only by you).", self._fallback
                )
        return self._uses_keyring

    def _read_fallback(self) -> dict[str, str]:
        try:
            return json.loads(self._fallback.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def get(self, name: str) -> str | None:
        if self.uses_keyring:
            import keyring

            return keyring.get_password(SERVICE, name)
        return self._read_fallback().get(name)

    def set(self, name: str, value: str) -> None:
        redact.remember([value])
        if self.uses_keyring:
            import keyring

            keyring.set_password(SERVICE, name, value)
            return
        data = self._read_fallback() | {name: value}
        fd = os.open(self._fallback, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.chmod(self._fallback, 0o600)

    def resolve(self, ref: str | None) -> str | None:
        """The key a provider's `api_key_ref` points to; None when it needs none."""
        if ref is None:
            return None
        scheme, _, name = ref.partition(":")
        value = os.environ.get(name) if scheme == "env" else self.get(name)
        if not value:
            where = f"the environment variable {name}" if scheme == "env" else f"the keyring entry {name!r}"
            raise ConfigError(f"No API key found in {where}. Add it in Settings → Providers.")
        redact.remember([value])  # from now on it is cut out of every error text and log line
        return value
