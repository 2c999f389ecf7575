"""`hearth server init | user add | user revoke`, run as the real command in a child process against a SQLite data
folder and a real PostgreSQL: the token printed once and working, plain sentences and exit 2 for what cannot be
done, never a traceback."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from runtime.store.db import alembic_config
from runtime.store.repo import DB_NAME, Store
from tests.support.services import free_port

ROOT = Path(__file__).resolve().parents[2]
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


async def _hearth(*args: str, env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """Exit code, stdout and stderr of `hearth ARGS` (the console script's module)."""
    base = {k: v for k, v in os.environ.items() if k not in ("HEARTH_HOME", "HEARTH_DATABASE_URL")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime.cli", *args, cwd=ROOT, env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = (stream.decode() for stream in await asyncio.wait_for(proc.communicate(), 120))
    assert "Traceback" not in err, err
    return proc.returncode, out, err


def _where(database: str, tmp_path: Path) -> tuple[list[str], str]:
    """The command line options naming the database, and its URL: a SQLite data folder by --data (no URL), a
    PostgreSQL database by --database."""
    if database.startswith("sqlite"):
        return ["--data", str(tmp_path / "data")], f"sqlite:///{tmp_path / 'data' / DB_NAME}"
    return ["--database", database], database


async def test_init_add_and_revoke_a_user(database, tmp_path):
    where, url = _where(database, tmp_path)
    code, out, err = await _hearth("server", "init", *where)
    assert (code, err) == (0, "") and out.endswith(f"is ready (schema {HEAD}).\n")

    code, out, err = await _hearth("server", "user", "add", "ada", "--quota-tokens", "50000", *where)
    assert code == 0 and "Added user ada" in err and "50,000 tokens" in err and "shown only this once" in err
    [token] = out.splitlines()  # alone on stdout: TOKEN=$(hearth server user add ada) works
    code, out, err = await _hearth("server", "user", "add", "bob", *where)
    assert code == 0 and "quota: unlimited" in err
    bob_token = out.strip()

    store = await Store.open_url(url)
    try:
        ada = await store.user_for_token(token)
        assert (ada["name"], ada["quota_tokens"]) == ("ada", 50_000)
        assert (await store.user_for_token(bob_token))["name"] == "bob"
    finally:
        await store.aclose()

    code, out, err = await _hearth("server", "user", "add", "ada", *where)
    assert (code, out) == (2, "") and err == ("hearth: There is already a user named 'ada' (a revoked user keeps "
                                              "their name). Choose another name.\n")
    code, out, err = await _hearth("server", "user", "revoke", "ada", *where)
    assert code == 0 and out.startswith("Revoked ada's token")
    code, out, err = await _hearth("server", "user", "revoke", "ada", *where)
    assert code == 0 and out.startswith("ada's token was revoked already, on ")
    code, out, err = await _hearth("server", "user", "revoke", "nobody", *where)
    assert (code, out, err) == (2, "", "hearth: There is no user named 'nobody'.\n")
    code, _, err = await _hearth("server", "user", "add", "two words", *where)
    assert code == 2 and err.startswith("hearth: A user name is letters, digits")
    code, _, err = await _hearth("server", "user", "add", "eve", "--quota-tokens", "-1", *where)
    assert code == 2 and "0 or more, not -1" in err

    store = await Store.open_url(url)
    try:
        assert await store.user_for_token(token) is None
        assert (await store.user_for_token(bob_token))["name"] == "bob"
    finally:
        await store.aclose()


async def test_the_database_comes_from_the_environment(postgres_url):
    plain = postgres_url.replace("postgresql+asyncpg://", "postgresql://")  # as a person writes it
    code, out, err = await _hearth("server", "user", "add", "ada", env={"HEARTH_DATABASE_URL": plain})
    assert code == 0, err
    store = await Store.open_url(postgres_url)
    try:
        assert (await store.user_for_token(out.strip()))["name"] == "ada"
    finally:
        await store.aclose()


async def test_without_a_database_the_usual_data_folder_is_used(tmp_path):
    code, out, _ = await _hearth("server", "init", env={"HEARTH_HOME": str(tmp_path / "home")})
    assert code == 0 and str(tmp_path / "home" / DB_NAME) in out
    assert (tmp_path / "home" / DB_NAME).is_file()


@pytest.mark.parametrize(("args", "says"), [
    (["server", "init", "--database", "postgresql://postgres@127.0.0.1:{port}/hearth"],
     "hearth: Hearth cannot reach the database hearth on 127.0.0.1:{port}: nothing answers there."),
    (["server", "user", "add", "ada", "--database", "mysql://root:s3cret@db/hearth"],
     "hearth: Hearth keeps its data in PostgreSQL (postgresql://…) or SQLite (sqlite:///PATH), not in mysql://"),
    (["server", "user", "revoke", "ada", "--data", "{missing}"],
     "hearth: There is no data folder {missing}. Start with: hearth server init --data {missing}"),
])
async def test_what_cannot_be_done_is_one_sentence_and_exit_2(args, says, tmp_path):
    fill = {"port": free_port(), "missing": tmp_path / "missing"}
    code, out, err = await _hearth(*(a.format(**fill) for a in args))
    assert (code, out) == (2, "") and err.startswith(says.format(**fill)) and len(err.splitlines()) == 1, err
    assert "s3cret" not in err and not (tmp_path / "missing").exists()
