"""`hearth server init | user add | user revoke` (runtime/cli/main.py): the server host's database and its users.

    hearth server init [--database URL] [--data DIR]
    hearth server user add NAME [--quota-tokens N] [--database URL] [--data DIR]
    hearth server user revoke NAME [--database URL] [--data DIR]

The database is `--database URL` (PostgreSQL: `postgresql://…`, made asyncpg's), else `$HEARTH_DATABASE_URL`,
else the SQLite database in the data folder `--data` (default: the usual data folder, as `--home`). Every command
migrates it to the newest schema; `init` does only that, and makes a data folder that is not there yet (the
others refuse one that is missing: a mistyped path should not start an empty server). They run beside a server
that is serving the same database.

`user add` prints the new user's API token alone on stdout (the last line; `TOKEN=$(hearth server user add ada)`
works) and what it did on stderr: the token is shown this once, the database keeps only its hash. `--quota-tokens
N` limits the tokens their turns may use in all (default: unlimited). `user revoke` makes the token open nothing
from now on; the user's tasks stay. A database that cannot be reached or used, a name that is taken or not valid,
no such user: one sentence on stderr and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ..errors import ConfigError, HearthError
from ..paths import data_folder
from .exits import EXIT_OK, EXIT_USAGE

COMMANDS = ("server",)
DATABASE_ENV = "HEARTH_DATABASE_URL"


def add_server_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--database", metavar="URL", help=f"the server's database (default: ${DATABASE_ENV}, else "
                                                         "the SQLite database in --data)")
    where.add_argument("--data", metavar="DIR", help="the server's data folder (default: the usual data folder)")
    server = sub.add_parser("server", help="the server host's database and users")
    cmds = server.add_subparsers(dest="server_command", required=True)
    cmds.add_parser("init", parents=[where], help="create or upgrade the server's database")
    user = cmds.add_parser("user", help="add or revoke a user of the server")
    users = user.add_subparsers(dest="user_command", required=True)
    add = users.add_parser("add", parents=[where], help="add a user and print their API token (shown once)")
    add.add_argument("name")
    add.add_argument("--quota-tokens", type=int, metavar="N",
                     help="tokens their turns may use in all (default: unlimited)")
    revoke = users.add_parser("revoke", parents=[where], help="revoke a user's API token")
    revoke.add_argument("name")


async def run(args: argparse.Namespace) -> int:
    try:
        return await _run(args)
    except HearthError as exc:  # the store's own sentences; nothing here holds a secret but the new token
        print(f"hearth: {exc}", file=sys.stderr)
        return EXIT_USAGE


async def _run(args: argparse.Namespace) -> int:
    from ..store.db import database_url, describe, head_revision
    from ..store.repo import DB_NAME, Store

    given = args.database or os.environ.get(DATABASE_ENV)
    if given:
        url = database_url(given)
        shown = f"SQLite database {url.database}" if url.get_backend_name() == "sqlite" else f"database {describe(url)}"
    else:
        home = data_folder(args.data or args.home)
        if args.server_command == "init":
            home.mkdir(parents=True, exist_ok=True)
        elif not home.is_dir():
            raise ConfigError(f"There is no data folder {home}. Start with: hearth server init --data {home}")
        url = database_url(f"sqlite:///{home / DB_NAME}")
        shown = f"SQLite database {Path(url.database or '')}"
    store = await Store.open_url(url)
    try:
        if args.server_command == "init":
            print(f"The {shown} is ready (schema {head_revision()}).")
        elif args.user_command == "add":
            user, token = await store.add_user(args.name, args.quota_tokens)
            quota = "unlimited" if user["quota_tokens"] is None else f"{user['quota_tokens']:,} tokens"
            print(f"Added user {user['name']} to the {shown} (quota: {quota}). Their API token, shown only this "
                  "once:", file=sys.stderr)
            print(token)
        else:
            user, now = await store.revoke_user(args.name)
            if not now:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(user["revoked_at"]))
                print(f"{user['name']}'s token was revoked already, on {when}.")
            else:
                print(f"Revoked {user['name']}'s token: it opens nothing from now on (their tasks stay).")
    finally:
        await store.aclose()
    return EXIT_OK
