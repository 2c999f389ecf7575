"""The server host's users in the store, on SQLite and PostgreSQL: an API token shown once and kept only as its
hash, revoking, the token quota counted atomically, and tasks that belong to a user (the desktop's belong to none)."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from sqlalchemy import text

from runtime.errors import ConfigError
from runtime.store.repo import Store


async def test_a_token_is_given_once_and_only_its_hash_is_kept(database):
    store = await Store.open_url(database)
    try:
        ada, token = await store.add_user("ada", None)
        assert token.startswith("hearth_") and len(token) >= 7 + 43  # 32 random bytes, base64
        assert ada["name"] == "ada" and ada["revoked_at"] is None and "token_hash" not in ada
        async with store.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT * FROM users"))).mappings().all()
        assert [r["token_hash"] for r in rows] == [hashlib.sha256(token.encode()).hexdigest()]
        assert not any(token in str(value) for r in rows for value in r.values())

        assert (await store.user_for_token(token))["id"] == ada["id"]
        _, other = await store.add_user("bob", None)
        assert other != token and (await store.user_for_token(other))["name"] == "bob"
        for wrong in ("", token[:-1], token + "x", "hearth_" + "A" * 43, "Bearer " + token):
            assert await store.user_for_token(wrong) is None, wrong
    finally:
        await store.aclose()


async def test_a_revoked_token_opens_nothing(database):
    store = await Store.open_url(database)
    try:
        ada, token = await store.add_user("ada")
        revoked, now = await store.revoke_user("ada")
        assert now and revoked["id"] == ada["id"] and revoked["revoked_at"] is not None
        assert await store.user_for_token(token) is None
        assert await store.revoke_user("ada") == (revoked, False)  # the first time stays
        with pytest.raises(ConfigError, match=r"^There is no user named 'nobody'\.$"):
            await store.revoke_user("nobody")
        with pytest.raises(ConfigError, match="already a user named 'ada'"):  # a revoked user keeps the name
            await store.add_user("ada")
    finally:
        await store.aclose()


async def test_user_names_and_quotas_that_cannot_be_are_refused_with_a_sentence(database):
    store = await Store.open_url(database)
    try:
        for bad in ("", " ada", "ada lovelace", "-ada", "a/b", "ada\n"):
            with pytest.raises(ConfigError, match="A user name is letters, digits"):
                await store.add_user(bad)
        with pytest.raises(ConfigError, match=r"^A user name may be at most 64 characters long; this one has 65\.$"):
            await store.add_user("a" * 65)
        assert (await store.add_user("a" * 64))[0]["name"] == "a" * 64
        with pytest.raises(ConfigError, match="0 or more, not -1"):
            await store.add_user("eve", -1)
        async with store.engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM users"))).scalar() == 1
    finally:
        await store.aclose()


async def test_a_quota_is_counted_in_the_database_also_by_concurrent_turns(database):
    store = await Store.open_url(database)
    try:
        free, _ = await store.add_user("free")
        assert store.quota_left(free) is None  # unlimited
        ada, _ = await store.add_user("ada", 100_000)
        assert store.quota_left(ada) == 100_000
        # 40 turns ending at once each add their tokens: a read-then-write would lose some of them.
        await asyncio.gather(*(store.add_usage(ada["id"], n) for n in range(1, 41)))
        ada = await store.user(ada["id"])
        assert ada["used_tokens"] == sum(range(1, 41)) == 820
        assert store.quota_left(ada) == 100_000 - 820
        await store.add_usage(ada["id"], 0)
        await store.add_usage(ada["id"], -5)  # nothing to count
        await store.add_usage(ada["id"], 3_000_000_000)  # beyond a 4-byte integer; one turn may overshoot
        ada = await store.user(ada["id"])
        assert ada["used_tokens"] == 3_000_000_820 and store.quota_left(ada) == 0
        assert (await store.user(free["id"]))["used_tokens"] == 0
    finally:
        await store.aclose()


async def _task(store: Store, task_id: str, owner_id: str | None, updated: float) -> None:
    await store.create_task(id=task_id, model="p/m", workspace="/w", knowledge=[], owner_id=owner_id)
    async with store.engine.begin() as conn:
        await conn.execute(text("UPDATE tasks SET updated_at = :u WHERE id = :id"), {"u": updated, "id": task_id})


async def test_a_users_tasks_are_theirs_alone_and_the_desktops_belong_to_nobody(database):
    store = await Store.open_url(database)
    try:
        ada, _ = await store.add_user("ada")
        bob, _ = await store.add_user("bob")
        await _task(store, "a1", ada["id"], 1)
        await _task(store, "local", None, 2)
        await _task(store, "a2", ada["id"], 3)
        await _task(store, "b1", bob["id"], 4)

        assert [t["id"] for t in await store.list_tasks(ada["id"])] == ["a2", "a1"]  # newest first
        assert [t["id"] for t in await store.list_tasks(bob["id"])] == ["b1"]
        assert [t["id"] for t in await store.list_tasks()] == ["local"]  # the desktop's list
        assert (await store.get_owned_task("a1", ada["id"]))["owner_id"] == ada["id"]
        assert (await store.get_owned_task("local", None))["id"] == "local"
        # Another user's task, the local person's, and none at all look the same.
        for task_id, owner in (("a1", bob["id"]), ("local", ada["id"]), ("a1", None), ("nope", ada["id"])):
            assert await store.get_owned_task(task_id, owner) is None, (task_id, owner)
        assert (await store.get_task("b1"))["owner_id"] == bob["id"]  # the turn engine's read is unchanged
    finally:
        await store.aclose()
