"""`hearth chat "text"` (a new chat) and `hearth chat --id ID "more"` (runtime/cli.py): streams the answer; the
chat's id goes to stderr so a script can go on with it. `hearth chat --list` lists chats, `--show ID` prints one,
`--model` picks the model of a new chat or changes it for the next answer of an existing one. Ctrl-C stops the
answer (exit 130)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from .cli_status import StatusLine
from .errors import ConfigError

if TYPE_CHECKING:
    from .api import Runtime

EXIT_OK, EXIT_PROVIDER, EXIT_STOPPED = 0, 3, 130  # as in cli.py


def add_chat_parser(sub) -> None:
    chat = sub.add_parser("chat", help="a quick conversation without a task: hearth chat \"text\"")
    chat.add_argument("text", nargs="?")
    chat.add_argument("--id", help="go on with this chat (default: a new chat)")
    chat.add_argument("--model", help="provider_id/model_name (for an existing chat: from this answer on)")
    chat.add_argument("--list", action="store_true", help="list chats, the most recent first")
    chat.add_argument("--show", metavar="ID", help="print a chat's conversation")


async def chat_command(rt: Runtime, args: argparse.Namespace) -> int:
    if args.list:
        for chat in await rt.chats.list():
            print(f"{chat.id}  {chat.title or '(untitled)'}  [{chat.model}]")
        return EXIT_OK
    if args.show:
        for msg in await rt.chats.messages(args.show):
            if msg.role == "event":
                change = msg.parts[0]
                print(f"--- model changed to {change.get('to')} ---\n")
            else:
                print(f"{'You' if msg.role == 'user' else 'Hearth'}: {msg.text}\n")
        return EXIT_OK
    if not args.text or not args.text.strip():
        raise ConfigError('Give the text to send, e.g. hearth chat "hello".')
    if args.id:
        chat = await rt.chats.get(args.id)
        if args.model:
            chat = await rt.chats.set_model(chat.id, args.model)
    else:
        chat = await rt.chats.create(model=args.model)
    handle = await rt.chats.send(chat.id, args.text)
    return await _stream(rt, chat.id, handle.turn_id)


async def _stream(rt: Runtime, chat_id: str, turn_id: str | None) -> int:
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task] = set()
    loop.add_signal_handler(signal.SIGINT, lambda: stopping.add(loop.create_task(rt.chats.stop(chat_id))))
    ended = None
    status = StatusLine()
    try:
        async for ev in rt.chats.subscribe(chat_id, turn_id=turn_id):
            status.event(ev)
            if ev.type == "text_delta":
                sys.stdout.write(ev.text)
                sys.stdout.flush()
                status.printed(ev.text)
            elif ev.type == "warning":
                print(f"\n[warning] {ev.message}", file=sys.stderr)
                status.printed("\n")
            elif ev.type == "turn_ended":
                ended = ev
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    print()
    print(f"chat {chat_id}", file=sys.stderr)
    if ended is None or ended.reason == "error":
        print(f"error: {ended.error if ended else 'the answer did not finish'}", file=sys.stderr)
        return EXIT_PROVIDER
    if ended.reason in ("aborted", "interrupted"):
        return EXIT_STOPPED
    return EXIT_OK
