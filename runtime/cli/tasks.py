"""Tasks and skills in the terminal (runtime/cli/main.py): `hearth tasks`, `hearth show ID [--steps]`, `hearth stop ID`,
`hearth skills list|add FOLDER`.

A task is named by its id or any unique start of it. `hearth tasks` has a header, the time of the last activity
and the app's state words (events.STATE_WORDS), or when it waits for a wake-up when it wakes; `hearth show` says
what it waits for and lists its background commands (status, since when, the end of their output), marks each
answer that did not simply complete (stopped, interrupted, failed with its error, cut off at the length limit)
and with `--steps` lists every turn's model steps and helpers (times, tokens, tool calls, endings). `hearth stop`
ends a task's wait for an answer (the turn ends stopped, its call is not run) or cancels its wait for a wake-up; a
running turn and background commands belong to the process that runs them (the app, a `hearth run`, `hearth
wake`), which owns the data folder, so there they are stopped (Stop, Ctrl-C).
"""

from __future__ import annotations

import argparse
import builtins
import time
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import ConfigError, TaskNotFound
from ..events import STATE_WORDS, state_key
from ..parts import has_marker
from ..tools.waiting import describe
from .exits import EXIT_OK

if TYPE_CHECKING:
    from ..api import Runtime
    from ..infos import MessageInfo, TaskInfo
    from ..services.wakeups import Wakeups



class TaskReader(Protocol):
    """What listing and showing tasks reads: `rt.tasks`, or a server's tasks (runtime/remote)."""

    async def list(self) -> builtins.list[TaskInfo]: ...

    async def get(self, task_id: str) -> TaskInfo: ...

    async def messages(self, task_id: str) -> builtins.list[MessageInfo]: ...

    async def turns(self, task_id: str) -> builtins.list[dict]: ...

    async def turn_details(self, task_id: str, turn_id: str) -> dict: ...

    def is_running(self, task_id: str) -> bool: ...

    def running(self) -> builtins.list[str]: ...

    async def stop(self, task_id: str) -> None: ...


@runtime_checkable
class BackgroundReader(Protocol):
    """A reader that also sees a task's background commands: this computer's `rt.tasks` (a server's does not)."""

    async def background(self, task_id: str) -> builtins.list[dict]: ...

    async def background_output(self, task_id: str, command_id: str, offset: int = ...) -> str: ...


ENDINGS = {"aborted": "stopped", "interrupted": "interrupted: Hearth closed while it ran", "error": "failed"}


def add_task_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("tasks", help="list tasks, the most recent first")
    show = sub.add_parser("show", help="show a task's conversation")
    show.add_argument("task_id", help="the task's id or a unique start of it")
    show.add_argument("--steps", action="store_true", help="also each turn's model steps and helpers")
    show.add_argument("--deliveries", action="store_true",
                      help="the files its turns delivered (every version), instead of the conversation")
    stop = sub.add_parser("stop", help="stop a task that waits for an approval, an answer or a wake-up")
    stop.add_argument("task_id", help="the task's id or a unique start of it")
    sub.add_parser("wake", help="run wake-ups (tasks waiting for a time or a command) until stopped, without the app")
    skills = sub.add_parser("skills", help="the skills the model can use").add_subparsers(dest="skills_command")
    skills.add_parser("list", help="installed skills (the default)")
    add = skills.add_parser("add", help="install a skill folder (one with a SKILL.md)")
    add.add_argument("folder")


class _Lister(Protocol):
    async def list(self) -> list[TaskInfo]: ...


async def resolve_task(tasks: _Lister, ref: str) -> str:
    """The id of the task `ref` names: its id, or the one task whose id starts with it."""
    ref = ref.strip()
    matches = [t.id for t in await tasks.list() if t.id.startswith(ref)] if ref else []
    if ref in matches or len(matches) == 1:
        return ref if ref in matches else matches[0]
    if not matches:
        raise TaskNotFound(ref)
    raise ConfigError(f"{len(matches)} tasks have an id starting with {ref!r}: give more of it.")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


async def tasks_command(reader: TaskReader) -> int:
    tasks = await reader.list()
    if not tasks:
        print("No tasks yet. Start one with: hearth run \"what to do\"")
        return EXIT_OK
    running = set(reader.running())
    print(f"{'ID':<32}  {'STATE':<15}  {'LAST ACTIVITY':<16}  {'MODEL':<28}  TITLE")
    for t in tasks:
        state = STATE_WORDS[state_key(t.state, t.last_reason, t.id in running)]
        wakes = t.wakes() if t.id not in running else None
        state = wakes or state
        print(f"{t.id:<32}  {state:<15}  {_when(t.updated_at):<16}  {t.model:<28}  {t.title or '(untitled)'}")
    return EXIT_OK


async def stop_command(reader: TaskReader, args: argparse.Namespace, *, running_too: bool = False,
                       wakeups: Wakeups | None = None) -> int:
    """End a task's wait for an answer, or (with `wakeups`, this computer's) its wait to wake up; `running_too` (a
    server, which runs the turn): also stop a running turn."""
    task_id = await resolve_task(reader, args.task_id)
    state = (await reader.get(task_id)).state
    if state == "running" and running_too:
        await reader.stop(task_id)
        print(f"Stopped: task {task_id}'s turn ends stopped; the next message starts afresh.")
        return EXIT_OK
    if state != "waiting":
        if wakeups is not None and await wakeups.cancel(task_id):
            print(f"Cancelled: task {task_id} no longer waits to wake up; the next message goes on from here.")
        else:
            print(f"Task {task_id} is not waiting for an answer: nothing to stop.")
        return EXIT_OK
    await reader.stop(task_id)
    print(f"Stopped: task {task_id} no longer waits for an answer; the next message starts afresh.")
    return EXIT_OK


async def show_command(reader: TaskReader, args: argparse.Namespace) -> int:
    task_id = await resolve_task(reader, args.task_id)
    task = await reader.get(task_id)
    state = STATE_WORDS[state_key(task.state, task.last_reason, reader.is_running(task_id))]
    print(f"# {task.title or '(untitled)'}  [{state}]")
    if task.wake is not None:
        print(f"{(task.waits_for() or '').capitalize()}: {task.wake['note']}")
    if isinstance(reader, BackgroundReader):
        for line in await _background_lines(reader, task_id):
            print(line)
    turns = {t["id"]: t for t in await reader.turns(task_id)}
    for m in await reader.messages(task_id):
        woke = any(p.get("type") == "wake" for p in m.parts)
        print(f"\n## {m.role}" + ("  (queued)" if m.status == "queued" else "") + ("  (wake-up)" if woke else ""))
        for line in _part_lines(m.parts):
            print(line)
        turn = turns.get(m.turn_id) if m.role == "assistant" else None
        for note in _endings(m, turn):
            print(f"[{note}]")
        if args.steps and turn is not None:
            for line in _step_lines(await reader.turn_details(task_id, turn["id"])):
                print(line)
    return EXIT_OK


async def _background_lines(reader: BackgroundReader, task_id: str) -> list[str]:
    """The task's background commands: id, how it stands, the command, and the last lines of a running one's output."""
    rows = await reader.background(task_id)
    lines = ["Background commands:"] if rows else []
    for row in rows:
        lines.append(f"  {describe(row, row['output_bytes'])}")
        if row["status"] == "running":
            tail = (await reader.background_output(task_id, row["id"], -400)).rstrip().splitlines()[-3:]
            lines += [f"    | {line}" for line in tail]
    return lines


def _part_lines(parts: list[dict]) -> list[str]:
    lines = []
    for part in parts:
        kind = part.get("type")
        if kind in ("text", "reasoning") and part.get("text"):
            lines.append(part["text"] if kind == "text" else f"(thinking) {part['text']}")
        elif kind == "tool_call":
            lines.append(f"[{part['name']} {part['state']}] {part.get('result') or ''}".rstrip())
        elif kind == "attachment":
            lines.append(f"(attached {part['name']})")
        elif kind == "answer":
            lines.append(f"(answered: {part['answer']})")
        elif kind in ("continue", "retry"):
            lines.append(f"({'continue' if kind == 'continue' else 'another answer, please'})")
        elif kind == "marker" and part.get("marker") == "warning":
            lines.append(f"[warning] {part.get('message', '')}")
    return lines


def _endings(message: MessageInfo, turn: dict | None) -> list[str]:
    notes = []
    reason = (turn or {}).get("reason")
    if reason in ENDINGS:
        error = (turn or {}).get("error")
        notes.append(f"{ENDINGS[reason]}: {error}" if reason == "error" and error else ENDINGS[reason])
    if message.truncated:
        notes.append("cut off at the model's length limit")
    if has_marker(message.parts, "repeating"):
        notes.append("stopped: the model was repeating itself")
    return notes


def _step_lines(details: dict) -> list[str]:
    lines = []
    for step in details["steps"]:
        took = (step["ended_at"] or step["started_at"]) - step["started_at"]
        first = f", first token {step['first_token_at'] - step['started_at']:.2f} s" if step["first_token_at"] else ""
        calls = ", ".join(c.get("name", "?") if isinstance(c, dict) else str(c) for c in step["tool_calls"] or [])
        lines.append(f"  step {step['step_index'] + 1}: {took:.2f} s{first}, {step['input_tokens']:,} in / "
                     f"{step['output_tokens']:,} out tokens, ended {step['finish_reason'] or '?'}"
                     + (f", called {calls}" if calls else ""))
    for sub in details["subagents"]:
        took = (sub["ended_at"] or sub["created_at"]) - sub["created_at"]
        lines.append(f"  helper {sub['definition'] or 'general'} ({sub['model'] or 'same model'}): {sub['status']}, "
                     f"{took:.2f} s, {sub['input_tokens']:,} in / {sub['output_tokens']:,} out tokens, "
                     f"{len(sub['tool_calls'] or [])} tool calls — {sub['goal']}")
    return lines


async def skills_command(rt: Runtime, args: argparse.Namespace) -> int:
    if args.skills_command == "add":
        skill = await rt.skills.add(args.folder)
        print(f"Added the skill {skill['name']}: {skill['description']}")
        return EXIT_OK
    skills = await rt.skills.list()
    if not skills:
        print("No skills yet. Add a folder with a SKILL.md: hearth skills add FOLDER")
    for s in skills:
        print(f"{s['name']:<24}  {s['description']}")
    return EXIT_OK
