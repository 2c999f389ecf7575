"""The server host's users: names, API tokens and token quotas. Part of `Store`.

A token is 32 random bytes from the OS (`secrets`), shown to the person once; only its SHA-256 is kept. A fast
hash is enough here, unlike for a password: nobody can guess 256 random bits, so there is no dictionary a slow or
salted hash would have to defeat, and a leaked database gives no token back. It also lets a request find its user
by the hash through a unique index, one lookup per request, where bcrypt or argon2 would cost ~100 ms on every
call and need a per-user salt to be looked up first.

A quota is a number of tokens (input + output as the provider reports them) a user's turns may use in all; None
is unlimited. Usage is added when a turn ends (`add_usage`, one atomic UPDATE, so concurrent turns never lose
each other's count), so one turn may overshoot; the next send is refused.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import uuid
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import ConfigError
from .lengths import refuse_too_long
from .models import UserRow

TOKEN_PREFIX = "hearth_"  # says what a token is for when it turns up in a shell history or a config file
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_USERS = UserRow.__table__
_SHOWN = [c for c in _USERS.c if c.name != "token_hash"]  # what a user row carries outside this module


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def quota_left(user: dict[str, Any]) -> int | None:
    """Tokens the user may still use (0 when spent or overshot), None when unlimited."""
    if user["quota_tokens"] is None:
        return None
    return max(0, user["quota_tokens"] - user["used_tokens"])


class UsersRepo:
    engine: AsyncEngine
    quota_left = staticmethod(quota_left)

    async def add_user(self, name: str, quota_tokens: int | None = None) -> tuple[dict[str, Any], str]:
        """A new user and their API token: returned this once, only its hash is kept. ConfigError for a name
        that is not one (letters, digits, '.', '_', '-', starting with a letter or digit), is taken, or a
        negative quota."""
        refuse_too_long(_USERS, {"name": name})
        if not _NAME.fullmatch(name):
            raise ConfigError(f"A user name is letters, digits, '.', '_' or '-', starting with a letter or digit, "
                              f"not {name!r}.")
        if quota_tokens is not None and quota_tokens < 0:
            raise ConfigError(f"A token quota is a number of tokens, 0 or more, not {quota_tokens}.")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        user_id = uuid.uuid4().hex
        try:
            async with self.engine.begin() as conn:
                await conn.execute(insert(UserRow).values(
                    id=user_id, name=name, token_hash=token_hash(token), created_at=time.time(),
                    quota_tokens=quota_tokens, used_tokens=0))
                user = (await conn.execute(select(*_SHOWN).where(UserRow.id == user_id))).one()
        except IntegrityError:
            raise ConfigError(f"There is already a user named {name!r} (a revoked user keeps their name). "
                              "Choose another name.") from None
        return dict(user._mapping), token

    async def revoke_user(self, name: str) -> tuple[dict[str, Any], bool]:
        """Revoke the user's token: it opens nothing from now on (their tasks stay). Returns the user and whether
        this revoked it (revoking twice keeps the first time). ConfigError when there is no such user."""
        async with self.engine.begin() as conn:
            revoked = await conn.execute(update(UserRow).where(UserRow.name == name, UserRow.revoked_at.is_(None))
                                         .values(revoked_at=time.time()))
            found = (await conn.execute(select(*_SHOWN).where(UserRow.name == name))).first()
        if found is None:
            raise ConfigError(f"There is no user named {name!r}.")
        return dict(found._mapping), revoked.rowcount == 1

    async def user(self, user_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(*_SHOWN).where(UserRow.id == user_id))).first()
        return dict(found._mapping) if found else None

    async def user_for_token(self, token: str) -> dict[str, Any] | None:
        """The user this API token belongs to; None for an unknown or revoked token."""
        if not token:
            return None
        async with self.engine.connect() as conn:
            found = (await conn.execute(select(*_SHOWN).where(
                UserRow.token_hash == token_hash(token), UserRow.revoked_at.is_(None)))).first()
        return dict(found._mapping) if found else None

    async def add_usage(self, user_id: str, tokens: int) -> None:
        """Count a turn's tokens against the user's quota (added in the database: concurrent turns never
        overwrite each other's count)."""
        if tokens > 0:
            async with self.engine.begin() as conn:
                await conn.execute(update(UserRow).where(UserRow.id == user_id)
                                   .values(used_tokens=UserRow.used_tokens + tokens))
