"""`hearth chat "text"` (a new chat) and `hearth chat --id ID "more"` (runtime/cli/main.py): streams the answer; the
chat's id goes to stderr so a script can go on with it. `hearth chat --list` lists chats, `--show ID` prints one,
`--model` picks the model of a new chat or changes it for the next answer of an existing one. Ctrl-C stops the
answer (exit 130). A memory the chat's model wants to save, change or delete asks first: in a terminal at once,
else the command exits 4 and `hearth chat --id ID --approve` (or `--deny`) answers."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .exits import EXIT_OK, EXIT_PROVIDER, EXIT_STOPPED, EXIT_WAITING
from .status import StatusLine

if TYPE_CHECKING:
    from ..api import Runtime
    from ..events import TurnEnded



def add_chat_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = sub.add_parser("chat", help="a quick conversation without a task: hearth chat \"text\"")
    chat.add_argument("text", nargs="?")
    chat.add_argument("--id", help="go on with this chat (default: a new chat)")
    chat.add_argument("--model", help="provider_id/model_name (for an existing chat: from this answer on)")
    chat.add_argument("--list", action="store_true", help="list chats, the most recent first")
    chat.add_argument("--show", metavar="ID", help="print a chat's conversation")
    answer = chat.add_mutually_exclusive_group()
    answer.add_argument("--approve", action="store_true", help="with --id: allow the memory write the chat waits for")
    answer.add_argument("--deny", action="store_true", help="with --id: refuse it")


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
    if args.approve or args.deny:
        return await _answer(rt, args)
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


async def _answer(rt: Runtime, args: argparse.Namespace) -> int:
    if not args.id or args.text:
        raise ConfigError("--approve and --deny answer a chat that waits: give --id ID and no text.")
    chat = await rt.chats.get(args.id)
    req = chat.pending_request if chat.state == "waiting" else None
    if not req:
        raise ConfigError(f"Chat {chat.id} is not waiting for an answer.")
    handle = await rt.chats.answer(chat.id, req["request_id"], "approve" if args.approve else "deny")
    return await _stream(rt, chat.id, handle.turn_id)


async def _stream(rt: Runtime, chat_id: str, turn_id: str | None) -> int:
    """Print the answer; in a terminal, ask about what it waits for and go on."""
    while True:
        ended = await _stream_turn(rt, chat_id, turn_id)
        if ended is None or ended.reason != "waiting" or not sys.stdin.isatty():
            break
        req = (await rt.chats.get(chat_id)).pending_request or {}
        print(f"{req.get('tool_name')} {json.dumps(req.get('tool_args') or {}, ensure_ascii=False)}",
              file=sys.stderr)
        reply = (await asyncio.to_thread(input, "Allow? [y]es / [n]o: ")).strip().lower()
        handle = await rt.chats.answer(chat_id, req["request_id"], "approve" if reply in ("y", "yes") else "deny")
        turn_id = handle.turn_id
    print()
    print(f"chat {chat_id}", file=sys.stderr)
    if ended is None or ended.reason == "error":
        print(f"error: {ended.error if ended else 'the answer did not finish'}", file=sys.stderr)
        return EXIT_PROVIDER
    if ended.reason in ("aborted", "interrupted"):
        return EXIT_STOPPED
    if ended.reason == "waiting":
        req = (await rt.chats.get(chat_id)).pending_request or {}
        print(f"waiting: {req.get('prompt', '')} Answer with: hearth chat --id {chat_id} --approve or --deny",
              file=sys.stderr)
        return EXIT_WAITING
    return EXIT_OK


async def _stream_turn(rt: Runtime, chat_id: str, turn_id: str | None) -> TurnEnded | None:
    """Print one turn's answer; its `turn_ended` (None if the stream ended without one)."""
    loop = asyncio.get_running_loop()
    stopping: set[asyncio.Task] = set()
    loop.add_signal_handler(signal.SIGINT, lambda: stopping.add(loop.create_task(rt.chats.stop(chat_id))))
    ended: TurnEnded | None = None
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
            elif ev.type == "input_requested":
                print(f"\n[waiting] {ev.prompt}", file=sys.stderr)
                status.printed("\n")
            elif ev.type == "turn_ended":
                ended = ev
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    return ended
