"""A Hearth server's address and the API token for it, kept in the system keyring (`hearth login`).

Never in a file: provider keys fall back to a 0600 file on a machine without a keyring (keys.py), a server token
does not. Without a keyring it is given each time (`--token`, `$HEARTH_TOKEN`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import ConfigError
from ..keys import SERVICE, keyring_usable

ENTRY = "server:{url}"  # the keyring entry of a server's token, under the "hearth" service


def server_url(url: str) -> str:
    """`url` as Hearth names a server: http(s)://host[:port][/path], without a trailing slash."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{url!r} is not a server address: give it as http://HOST:PORT or https://HOST.")
    return url


def saved_token(url: str) -> str | None:
    """The token `hearth login` kept for the server at `url`; None without one or without a keyring."""
    if not keyring_usable():
        return None
    import keyring
    from keyring.errors import KeyringError

    try:
        return keyring.get_password(SERVICE, ENTRY.format(url=url))
    except KeyringError:
        return None


def save_token(url: str, token: str) -> None:
    if not keyring_usable():
        raise ConfigError("This computer has no system keyring, so Hearth cannot keep the token (it never writes it "
                          "to a file). Give it with --token or $HEARTH_TOKEN instead.")
    import keyring
    from keyring.errors import KeyringError

    try:
        keyring.set_password(SERVICE, ENTRY.format(url=url), token)
    except KeyringError:
        raise ConfigError("The system keyring refused to keep the token (is it locked?). Unlock it and log in "
                          "again, or give the token with --token or $HEARTH_TOKEN.") from None
