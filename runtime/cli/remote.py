"""`hearth --server URL [--token TOKEN] COMMAND …` and `hearth login URL` (runtime/cli/main.py): `run`, `run --task`,
`tasks`, `show`, `answer` and `stop` on a Hearth server (runtime/remote), printed as on this computer (run.py,
tasks.py print both).

The server is `--server` or `$HEARTH_SERVER`; the token `--token`, `$HEARTH_TOKEN`, or the one `hearth login URL`
checked with the server and kept in the system keyring (never in a file). With `$HEARTH_SERVER` set, the other
commands still work on this computer; an explicit `--server` with one of them is a usage error.

Exit codes as on this computer (cli/exits.py), except: never 5 (no data folder is shared); 2 when the server refuses
the token (401), a task id or a request (400, 404); 3 when the quota is spent (402), as when a provider refuses; 8
when the server cannot be reached, or cannot reach its own database (503). `hearth stop` also stops a running turn
(the server runs it). What stays on this computer: `--doc` (the server cannot read this computer's files), `--plan`,
`--network`, `--queued` and `--retry` are refused with a sentence; `--no-memory` changes nothing (a server's tasks
use no memory). A new task's title (the server's `goal`) is the first line of its first message.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .exits import EXIT_OK
from .run import answer_command, follow, text_to_send
from .tasks import resolve_task, show_command, stop_command, tasks_command

if TYPE_CHECKING:
    from ..remote.tasks import RemoteTasks

COMMANDS = ("run", "tasks", "show", "answer", "stop")
SERVER_ENV, TOKEN_ENV = "HEARTH_SERVER", "HEARTH_TOKEN"
LOCAL_ONLY = (("doc", "--doc (the server cannot read this computer's files)"), ("plan", "--plan"),
              ("network", "--network"), ("queued", "--queued"), ("retry", "--retry"))
TITLE_LENGTH = 80


def add_global_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", metavar="URL", help=f"run the command on this Hearth server (default: "
                                                        f"${SERVER_ENV}): run, tasks, show, answer, stop")
    parser.add_argument("--token", help=f"the server's API token (default: ${TOKEN_ENV}, or the one hearth login "
                                        "kept in the system keyring)")


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    login = sub.add_parser("login", help="check a Hearth server's API token and keep it in the system keyring")
    login.add_argument("url", help="the server, e.g. http://192.168.1.20:8300")
    login.add_argument("--token", dest="login_token", help="the token (default: asked for, not shown)")


def server_of(args: argparse.Namespace) -> str | None:
    """The server a command goes to; None: this computer."""
    if args.command not in COMMANDS and not args.server:
        return None
    return args.server or os.environ.get(SERVER_ENV) or None


def _open(url: str, token: str) -> RemoteTasks:
    from ..remote.client import ServerClient
    from ..remote.tasks import RemoteTasks

    return RemoteTasks(ServerClient(url, token, on_state=_tell_state))


def _tell_state(state: str) -> None:
    print(f"\n[{'reconnecting: the server does not answer' if state == 'reconnecting' else 'reconnected'}]",
          file=sys.stderr)


async def login(args: argparse.Namespace) -> int:
    from ..remote.tokens import save_token, server_url

    url = server_url(args.url)
    token = args.login_token
    if token is None:
        token = getpass.getpass(f"API token for {url}: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = token.strip()
    if not token:
        raise ConfigError("No token given: paste the one `hearth server user add` printed.")
    tasks = _open(url, token)
    try:
        await tasks.list()  # the server refuses a token it does not know (401)
    finally:
        await tasks.aclose()
    save_token(url, token)
    print(f"Logged in to {url}; the token is kept in the system keyring. Use it with: hearth --server {url} …")
    return EXIT_OK


async def run(args: argparse.Namespace, server: str) -> int:
    from ..remote.tokens import saved_token, server_url

    if args.command not in COMMANDS:
        raise ConfigError(f"hearth {args.command} works on this computer only: leave out --server.")
    url = server_url(server)
    token = args.token or os.environ.get(TOKEN_ENV) or saved_token(url)
    if not token:
        raise ConfigError(f"No token for {url}. Log in with: hearth login {url} (or give --token or ${TOKEN_ENV}).")
    tasks = _open(url, token)
    try:
        if args.command == "run":
            return await _run(tasks, args)
        if args.command == "answer":
            return await answer_command(tasks, args)
        if args.command == "tasks":
            return await tasks_command(tasks)
        if args.command == "stop":
            return await stop_command(tasks, args, running_too=True)
        if args.deliveries:
            raise ConfigError("--deliveries works on this computer's tasks only, not on a server (yet).")
        return await show_command(tasks, args)
    finally:
        await tasks.aclose()


async def _run(tasks: RemoteTasks, args: argparse.Namespace) -> int:
    for name, flag in LOCAL_ONLY:
        if getattr(args, name):
            raise ConfigError(f"{flag} works on this computer's tasks only, not on a server.")
    text = text_to_send(args)
    if args.task:
        task_id = await resolve_task(tasks, args.task)
    else:
        first_line = text.strip().splitlines()[0]
        title = first_line if len(first_line) <= TITLE_LENGTH else first_line[:TITLE_LENGTH - 1] + "…"
        task_id = (await tasks.create(title, args.model, args.approval)).id
    started = await tasks.send(task_id, text)
    return await follow(tasks, task_id, started.turn_id)
