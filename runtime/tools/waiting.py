"""Work beyond one turn: `background_command` checks on and stops the task's background commands
(tools/shell/background.py), `wait` ends the turn until a time or until one of them finishes (services/wakeups.py
keeps the wake-up and starts the next turn by itself)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from datetime import time as dt_time
from typing import Any, Protocol

from ..errors import ToolError
from .base import Effect, ToolContext, ToolResult
from .shell.background import READ_LIMIT, BackgroundCommands, read_log

MAX_WAIT = 30 * 24 * 3600.0  # seconds: a wake-up further away than this is refused


class WakeSetter(Protocol):
    async def set(self, task_id: str, turn_id: str, note: str, due_at: float | None,
                  command_id: str | None) -> str:
        """Keep the task's wake-up (replacing the one it had); a sentence saying when it wakes."""


def describe(row: dict[str, Any], output_bytes: int | None = None) -> str:
    """One line about a background command: id, status, since when, the command."""
    started = time.strftime("%H:%M:%S", time.localtime(row["started_at"]))
    if row["status"] == "running":
        state = f"running since {started}"
    elif row["status"] == "exited":
        state = f"exited with code {row['exit_code']}"
    else:
        state = {"stopped": "stopped", "interrupted": "interrupted by a quit of Hearth"}.get(row["status"],
                                                                                             row["status"])
    size = f", {output_bytes} bytes of output" if output_bytes is not None else ""
    return f"{row['id']}: {state}{size}: {row['command']}"


class BackgroundCommand:
    name = "background_command"
    description = (
        "Check on the commands this task started with run_shell(background=true): action \"list\" lists them; "
        "\"read\" returns a command's output from byte `offset` (a negative offset counts from the end; at most "
        f"{READ_LIMIT // 1024} KiB per read) with its status; \"stop\" stops it and everything it started.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "read", "stop"]},
            "id": {"type": "string", "description": "The command's id (read, stop)."},
            "offset": {"type": "integer", "description": "Byte offset to read from (default 0)."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It reads or stops commands this task started in the background."

    def __init__(self, commands: BackgroundCommands):
        self.commands = commands

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        action = args.get("action")
        if action == "list":
            rows = await self.commands.list(ctx.task_id)
            if not rows:
                return ToolResult("This task has started no background commands.")
            return ToolResult("\n".join(describe(r, r["output_bytes"]) for r in rows))
        if action not in ("read", "stop"):
            raise ToolError("action must be \"list\", \"read\" or \"stop\".")
        command_id = args.get("id")
        row = await self.commands.get(ctx.task_id, command_id) if isinstance(command_id, str) else None
        if row is None:
            raise ToolError(f"This task has no background command {command_id!r}; action \"list\" lists them.")
        if action == "stop":
            stopped = await self.commands.stop(ctx.task_id, row["id"])
            row = await self.commands.get(ctx.task_id, row["id"]) or row
            return ToolResult(("Stopped. " if stopped else "It was not running. ") + describe(row))
        offset = args.get("offset", 0)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ToolError("offset must be a whole number of bytes.")
        piece = read_log(row["log_path"], offset)
        more = f" More from offset {piece.end}." if piece.end < piece.size else ""
        return ToolResult(f"{describe(row, piece.size)}\n[bytes {piece.start}-{piece.end} of {piece.size}.{more}]\n"
                          f"{piece.text or '[no output]'}")


class Wait:
    name = "wait"
    description = (
        "End your turn and be woken later: when a background command finishes (command: its id), after a number "
        "of seconds (seconds), or at a time (until: ISO 8601, e.g. 2026-12-07T09:00, local time unless it has a "
        "zone; or a time of day, e.g. 09:00, meaning the next time it is 09:00). Give one of them, and a short "
        "note of why. The next turn starts by itself and tells you what happened; a message from the person "
        "before then cancels the wait.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "Wake when this background command finishes."},
            "seconds": {"type": "number", "minimum": 1, "description": "Wake after this many seconds."},
            "until": {"type": "string", "description": "Wake at this time (ISO 8601, or a time of day)."},
            "note": {"type": "string", "description": "Why you wait, in a few words; shown to the person."},
        },
        "required": ["note"],
        "additionalProperties": False,
    }
    effect = Effect.read_only
    touches = "It ends this turn; the task wakes up by itself later. It changes nothing."

    def __init__(self, wakes: WakeSetter, commands: BackgroundCommands):
        self.wakes = wakes
        self.commands = commands

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        note = args.get("note")
        if not isinstance(note, str) or not note.strip():
            raise ToolError("Say in a short note why you wait (note).")
        given = [k for k in ("command", "seconds", "until") if args.get(k) is not None]
        if len(given) != 1:
            raise ToolError("Give exactly one of command, seconds or until.")
        due_at, command_id = None, None
        if given == ["command"]:
            row = await self.commands.get(ctx.task_id, str(args["command"]))
            if row is None:
                raise ToolError(f"This task has no background command {args['command']!r}.")
            command_id = row["id"]
        else:
            due_at = due_time(args)
        when = await self.wakes.set(ctx.task_id, ctx.turn_id, note.strip()[:300], due_at, command_id)
        return ToolResult(f"{when} Your turn ends now.", state={"ends_turn": True})


def _until(text: str, now: float) -> float:
    """An ISO 8601 date and time (naive: local time), or a time of day alone: the next time the clock shows it."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    try:
        clock = dt_time.fromisoformat(text)
    except ValueError:
        raise ToolError(f"until must be an ISO 8601 time such as 2026-12-07T09:00, or a time of day such as 09:00, "
                        f"not {text!r}.") from None
    today = datetime.fromtimestamp(now)
    due = datetime.combine(today.date(), clock)
    return (due if due > today else due + timedelta(days=1)).timestamp()


def due_time(args: dict[str, Any], now: float | None = None) -> float:
    """When `seconds` from now, or the time `until` names, comes: checked to lie ahead, within MAX_WAIT."""
    now = time.time() if now is None else now
    if (seconds := args.get("seconds")) is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
            raise ToolError("seconds must be a number above 0.")
        due = now + float(seconds)
    else:
        due = _until(str(args["until"]).strip(), now)
        if due <= now:
            raise ToolError(f"{args['until']} has already passed; it is now "
                            f"{datetime.fromtimestamp(now).isoformat(timespec='seconds')}.")
    if due - now > MAX_WAIT:
        raise ToolError(f"A wait may last at most {int(MAX_WAIT // 86400)} days.")
    return due
