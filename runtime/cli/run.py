"""`hearth run` and `hearth answer`: send an input (or an answer) and stream the task's turns to the terminal until
it is idle; in a terminal, approvals (y / n / always) and questions are asked on the way. Ctrl-C stops the turn,
waits for its finalize, then exits 130. Before the last line (`task ID`) it says what outlives it and what does not:
background commands end with this process; a wake-up waits for one that runs them. The exit codes are
cli/exits.py's.

The streaming, asking and answering are written against `Turns`: this computer's tasks (`LocalTurns` over
`rt.tasks`) or a server's (runtime/remote, `hearth --server`), so both print the same."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError, HearthError, RequestNotFound
from ..redact import redact
from .exits import EXIT_OK, EXIT_PROVIDER, EXIT_STOPPED, EXIT_WAITING
from .status import StatusLine
from .tasks import resolve_task

if TYPE_CHECKING:
    from ..api import Runtime, Tasks
    from ..events import Event, TurnEnded
    from ..infos import TaskInfo, TurnHandle


class Started(Protocol):
    @property
    def turn_id(self) -> str | None: ...


class Turns(Protocol):
    """What following a task's turns needs of its tasks, here or on a server."""

    async def list(self) -> list[TaskInfo]: ...

    async def get(self, task_id: str) -> TaskInfo: ...

    async def answer(self, task_id: str, request_id: str, answer: str, *, remember: bool = False,
                     rule_command: str | None = None) -> Started: ...

    async def stop(self, task_id: str) -> None: ...

    def follow(self, task_id: str, turn_id: str | None) -> AsyncIterator[Event]: ...


class LocalTurns:
    """`rt.tasks` as `Turns`: a turn's events and its queued successors' until the task is idle."""

    def __init__(self, tasks: Tasks):
        self._tasks = tasks
        self.list, self.get, self.stop = tasks.list, tasks.get, tasks.stop

    async def answer(self, task_id: str, request_id: str, answer: str, *, remember: bool = False,
                     rule_command: str | None = None) -> TurnHandle:
        return await self._tasks.answer(task_id, request_id, answer, remember, rule_command=rule_command)

    async def say_what_outlives(self, task_id: str) -> None:
        """This process ends with the turn: its background commands end with it, and a wake-up waits for a process
        that runs them (the app, `hearth serve`, `hearth wake`)."""
        commands = [c for c in await self._tasks.background(task_id) if c["status"] == "running"]
        if commands:
            print(f"{len(commands)} background command(s) of this task end now, with this command (interrupted).",
                  file=sys.stderr)
        task = await self._tasks.get(task_id)
        if task.wake is not None:
            print(f"{(task.waits_for() or '').capitalize()} ({task.wake['note']}): it wakes while the app, "
                  "`hearth serve` or `hearth wake` runs.", file=sys.stderr)

    async def follow(self, task_id: str, turn_id: str | None) -> AsyncIterator[Event]:
        events = self._tasks.subscribe(task_id, turn_id=turn_id, follow=True)
        idle = asyncio.ensure_future(self._tasks.wait_idle(task_id))
        try:
            while True:
                nxt = asyncio.ensure_future(anext(events))
                await asyncio.wait({nxt, idle}, return_when=asyncio.FIRST_COMPLETED)
                if not nxt.done():
                    nxt.cancel()
                    await asyncio.gather(nxt, return_exceptions=True)
                    return
                yield nxt.result()
        except StopAsyncIteration:
            return
        finally:
            idle.cancel()
            await events.aclose()


def add_run_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="send an input and stream the turn")
    run.add_argument("text", nargs="?")
    run.add_argument("--task", help="continue this task (default: a new task)")
    run.add_argument("--queued", action="store_true", help="run the task's queued inputs, in order")
    run.add_argument("--retry", action="store_true", help="another answer to the task's last input (with --task)")
    run.add_argument("--model", help="provider_id/model_name for a new task")
    run.add_argument("--approval", default="ask", choices=["ask", "auto_edit", "full_auto"])
    run.add_argument("--plan", action="store_true", help="a new task plans first; you approve the plan")
    run.add_argument("--doc", action="append", default=[], metavar="PATH",
                     help="a document or folder a new task works from (repeatable)")
    run.add_argument("--no-memory", action="store_true", help="a new task neither uses nor saves memories")
    run.add_argument("--network", action="store_true", help="a new task's commands may use the network")
    answer = sub.add_parser("answer", help="answer a task that waits for an approval or a question")
    answer.add_argument("task_id")
    how = answer.add_mutually_exclusive_group(required=True)
    how.add_argument("--approve", action="store_true")
    how.add_argument("--deny", action="store_true")
    how.add_argument("--text", help="the answer to a question")
    answer.add_argument("--always", action="store_true",
                        help="remember the approval or denial in this task: for a shell command, for commands "
                             "starting like it; for another tool, for that tool")
    answer.add_argument("--network", action="store_true",
                        help="with --approve: let this one shell command use the network (when it asks for it)")


async def run_command(rt: Runtime, args: argparse.Namespace) -> int:
    if args.task:
        args.task = await resolve_task(rt.tasks, args.task)
    if args.queued:
        if not args.task or args.text:
            raise ConfigError("--queued runs a task's queued inputs: give --task ID and no text.")
        handle = await rt.tasks.run_queued(args.task)
        if handle is None:
            print("Nothing is queued for this task.", file=sys.stderr)
            return EXIT_OK
    elif args.retry:
        if not args.task or args.text:
            raise ConfigError("--retry answers a task's last input again: give --task ID and no text.")
        handle = await rt.tasks.retry(args.task)
    else:
        text_to_send(args)
        task = await rt.get_task(args.task) if args.task else await rt.create_task(
            model=args.model, approval=args.approval, planning=args.plan, knowledge=args.doc,
            memory=not args.no_memory, network=args.network)
        handle = await rt.send(task.id, args.text)
    return await follow(LocalTurns(rt.tasks), handle.task_id, handle.turn_id)


def text_to_send(args: argparse.Namespace) -> str:
    """The text of `hearth run TEXT`; a usage error, before any task is made, when it has none."""
    if not args.text or not args.text.strip():
        raise ConfigError("Give the text to send, e.g. hearth run \"hello\".")
    text: str = args.text
    return text


async def follow(turns: Turns, task_id: str, turn_id: str | None) -> int:
    """Stream the task's turns until it is idle; in a terminal, answer what it asks on the way."""
    from ..events import EndReason

    loop = asyncio.get_running_loop()
    following = asyncio.current_task()
    stopped = False
    stopping: set[asyncio.Task] = set()
    ended: TurnEnded | None = None

    async def stop() -> None:
        try:
            await turns.stop(task_id)
        except HearthError as exc:  # a server that cannot be reached cannot be told: stop waiting for it
            print(f"\nhearth: {redact(str(exc))}", file=sys.stderr)
            if following is not None:
                following.cancel()

    def on_sigint() -> None:
        nonlocal stopped
        stopped = True
        stopping.add(loop.create_task(stop()))

    loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        while True:
            ended = await _stream_until_idle(turns, task_id, turn_id)
            if stopped or ended is None or ended.reason != EndReason.waiting or not sys.stdin.isatty():
                break
            try:
                handle = await _ask_in_terminal(turns, task_id)
            except RequestNotFound:
                if not stopped:
                    raise
                break  # Ctrl-C while the question was asked: the wait was stopped, not answered
            if handle is None:
                break
            turn_id = handle.turn_id
    except asyncio.CancelledError:
        if not stopped or following is None or following.uncancel():
            raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    print()
    if isinstance(turns, LocalTurns):  # a server's task runs on there, with its commands and wake-ups
        await turns.say_what_outlives(task_id)
    print(f"task {task_id}", file=sys.stderr)
    if ended is None:
        return EXIT_STOPPED if stopped else EXIT_PROVIDER
    if ended.reason in (EndReason.aborted, EndReason.interrupted) or stopped:
        return EXIT_STOPPED
    if ended.reason == EndReason.error:
        print(f"error: {ended.error}", file=sys.stderr)  # redacted by finalize
        return EXIT_PROVIDER
    if ended.reason == EndReason.waiting:
        req = (await turns.get(task_id)).pending_request or {}
        how = {"approval": "--approve or --deny", "plan": '--approve, or --text "what to change"'}.get(
            req.get("kind", ""), '--text "..."')
        if req.get("network_offer"):
            how += " (--approve --network: this one command may use the network)"
        print(f"waiting: {req.get('prompt', '')} Answer with: hearth answer {task_id} {how}", file=sys.stderr)
        return EXIT_WAITING
    return EXIT_OK


async def _stream_until_idle(turns: Turns, task_id: str, turn_id: str | None) -> TurnEnded | None:
    """Print the task's events across its queued turns; the last `turn_ended`, once the task is idle."""
    ended: TurnEnded | None = None
    status = StatusLine()
    async for ev in turns.follow(task_id, turn_id):
        status.event(ev)
        status.printed(_print_event(ev))
        if ev.type == "turn_ended":
            ended = ev
    return ended


def _print_event(ev: Event) -> str:
    """Print what the person follows of an event; returns what was printed."""
    if ev.type == "text_delta":
        sys.stdout.write(ev.text)
        sys.stdout.flush()
        return ev.text
    if ev.type == "tool_call" and ev.state != "pending":
        line = f"\n[{ev.name} {ev.state}]\n"
    elif ev.type == "input_requested":
        line = f"\n[waiting] {ev.prompt}\n"
    elif ev.type == "warning":
        line = f"\n[warning] {ev.message}\n"
        if ev.code == "repeating":  # going on would repeat it again: another answer is the way on
            line += f"Ask for another answer: hearth run --task {ev.task_id} --retry\n"
    else:
        return ""
    sys.stderr.write(line)
    return line


async def _ask_in_terminal(turns: Turns, task_id: str) -> Started | None:
    """Ask the task's approval, plan or question on the terminal and answer it; None when it waits for none."""
    req = (await turns.get(task_id)).pending_request
    if not req:
        return None
    if req["kind"] == "approval":
        args = json.dumps(req.get("tool_args") or {}, ensure_ascii=False)
        print(f"{req['tool_name']} {args}", file=sys.stderr)
        if req.get("touches"):
            print(req["touches"], file=sys.stderr)
        rule = req.get("suggested_rule")
        network = " / [w]ith network" if req.get("network_offer") else ""
        scope = f" (commands starting “{rule}”)" if rule else ""
        reply = (await asyncio.to_thread(input, f"Allow? [y]es{network} / [n]o / [a]lways{scope} / [N]ever: ")).strip()
        answer = "approve" if reply.lower() in ("y", "yes", "a", "always") else "deny"
        if network and reply.lower() in ("w", "with network"):
            answer = "approve_network"
        remember = reply.lower() in ("a", "always") or reply == "N" or reply.lower() == "never"
        return await turns.answer(task_id, req["request_id"], answer, remember=remember,
                                  rule_command=rule if remember else None)
    if req["kind"] == "plan":
        steps = "\n".join(f"  {i}. {step}" for i, step in enumerate(req.get("plan") or [], 1))
        print(f"Plan: {req['prompt']}\n{steps}", file=sys.stderr)
        reply = (await asyncio.to_thread(input, "Approve? [y]es, or say what to change: ")).strip()
        answer = "approve" if reply.lower() in ("y", "yes") else (reply or "Not this plan.")
        return await turns.answer(task_id, req["request_id"], answer)
    text = await asyncio.to_thread(input, f"{req['prompt']}\n> ")
    return await turns.answer(task_id, req["request_id"], text)


async def answer_command(turns: Turns, args: argparse.Namespace) -> int:
    args.task_id = await resolve_task(turns, args.task_id)
    req = (await turns.get(args.task_id)).pending_request
    if not req:
        raise ConfigError(f"Task {args.task_id} is not waiting for an answer.")
    if args.network and not (req["kind"] == "approval" and args.approve and req.get("network_offer")):
        raise ConfigError("--network goes with --approve, for a shell command that runs in the sandbox without "
                          "network; this request is not one.")
    rule = req.get("suggested_rule") if args.always else None  # a shell command: commands starting like it
    if req["kind"] == "approval":
        if args.text is not None:
            raise ConfigError("This task waits for an approval: answer with --approve or --deny.")
        answer = ("approve_network" if args.network else "approve") if args.approve else "deny"
    elif req["kind"] == "plan":  # --approve, or --deny / --text "what to change" to reject it
        answer = "approve" if args.approve else (args.text or "Not this plan.")
    else:
        if args.text is None:
            raise ConfigError(f"This task asks: {req['prompt']} Answer with --text \"...\".")
        answer = args.text
    handle = await turns.answer(args.task_id, req["request_id"], answer, remember=args.always, rule_command=rule)
    return await follow(turns, args.task_id, handle.turn_id)
