"""run_shell: a command in the task's workspace, in its own process group, always cleaned up.

The command runs as `/bin/sh -c COMMAND` in a new session (its own process group, no controlling terminal, so
nothing can block on a tty prompt), stdin from /dev/null, stdout and stderr combined. Output is read as it
comes and only the head and tail are kept, so a command that prints forever costs bounded memory.

No process may outlive the call: on timeout, on cancellation (Stop), and after the shell exits (background
jobs it left behind), the whole group gets SIGTERM, then SIGKILL after a short grace.

With a `Sandbox` (tools/shell/sandbox.py, given per turn by the AgentKit) the shell runs inside it: only the workspace
and a private /tmp writable, the data folder and secret folders hidden, no network unless the task allows it or
the person approved this one command with network (`ctx.extra["network"]`). A call that was approved as
sandboxed (`ctx.extra["sandboxed"]`) is refused rather than run without one when the sandbox is gone meanwhile.
Without a sandbox the command runs as the person, as before; approvals (tools/approvals.py) make sure that
happens only when the person agreed.

With `background: true` (offered when the AgentKit gives the task's `BackgroundCommands`) the same launch is
started as the task's background command (tools/shell/background.py) and the call returns at once with its id.
The process group's handling is tools/shell/process.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import ToolError
from runtime.tools.base import Effect, ToolContext, ToolResult
from runtime.tools.shell.parse import suggest_rule
from runtime.tools.shell.process import group_alive, kill_group, pump, reap, settle, spawn, until_exit
from runtime.tools.shell.sandbox import Launch, Sandbox, SandboxPolicy

if TYPE_CHECKING:
    from runtime.tools.shell.background import BackgroundCommands

BACKGROUND_PARAMETER = {
    "type": "boolean",
    "description": "Run it in the background: return at once with its id instead of waiting for it.",
}
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
OUTPUT_CAP = 32 * 1024  # bytes kept in total: half from the start, half from the end
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def clean_env(environ: Mapping[str, str] | None = None, hidden: Collection[str] = ()) -> dict[str, str]:
    """A copy of the environment for a child process: without the variables named in `hidden` (those the
    settings point to: `Settings.secret_env_names()`), Hearth's own (HEARTH_*), and anything whose name looks
    like a secret. Names compare case-insensitively, as Windows does."""
    env = os.environ if environ is None else environ
    drop = {name.upper() for name in hidden}
    return {
        k: v
        for k, v in env.items()
        if (u := k.upper()) not in drop and not u.startswith("HEARTH_") and not any(m in u for m in SECRET_MARKERS)
    }


class HeadTail:
    """Keeps the first `cap/2` and last `cap/2` bytes of a stream and counts the rest."""

    def __init__(self, cap: int = OUTPUT_CAP):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if omitted <= 0:
            return head + tail
        return f"{head}\n[... {omitted} bytes omitted ...]\n{tail}"


def cap_middle(text: str, cap: int) -> str:
    """`text` cut to about `cap` characters, keeping its start and end."""
    if len(text) <= cap:
        return text
    half = cap // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


class RunShell:
    name = "run_shell"
    description = (
        "Run a shell command (/bin/sh -c) in the workspace folder and return its combined stdout and stderr "
        f"and exit code. Times out after timeout_seconds (default {int(DEFAULT_TIMEOUT)}, at most "
        f"{int(MAX_TIMEOUT)}). There is no input and no terminal; background processes are stopped when the "
        f"command ends. Output over {OUTPUT_CAP // 1024} KiB keeps only its start and end."
    )
    sandboxed_description = (
        " It runs in a sandbox: only the workspace and a private /tmp (emptied after each command) are writable, "
        "the rest of the file system is read-only, and there is no network unless the person allows it."
    )
    background_description = (
        " With background: true it starts the command and returns at once with its id: the command keeps running "
        "after your turn (no time limit) until it ends or is stopped; read its output and stop it with "
        "background_command, or end your turn with wait(command=ID) to be woken when it finishes."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command line to run."},
            "timeout_seconds": {
                "type": "number",
                "minimum": 1,
                "maximum": MAX_TIMEOUT,
                "description": f"Seconds before the command is stopped, default {int(DEFAULT_TIMEOUT)}.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    effect = Effect.external

    rule_arg = "command"  # permission rules match this argument's parsed command line

    def __init__(self, cap: int = OUTPUT_CAP, default_timeout: float = DEFAULT_TIMEOUT,
                 hidden_env: Collection[str] = (), sandbox: Sandbox | None = None, hidden: tuple[Path, ...] = (),
                 network: bool = False, unsandboxed_reason: str = "",
                 background: BackgroundCommands | None = None):
        self.cap = cap
        self.default_timeout = default_timeout
        self.hidden_env = frozenset(hidden_env)  # see clean_env
        self.sandbox = sandbox
        self.hidden = hidden  # what the sandbox hides (tools/shell/sandbox.py hidden_paths)
        self.network = network  # the task allows the network to every command
        self.unsandboxed_reason = unsandboxed_reason  # why there is no sandbox, in plain words
        self.background = background  # the task's background commands; None: the tool offers none
        if sandbox is not None:
            self.description = self.description + self.sandboxed_description
        if background is not None:
            self.description = self.description + self.background_description
            props = {**self.parameters["properties"], "background": BACKGROUND_PARAMETER}
            self.parameters = {**self.parameters, "properties": props}

    def env(self) -> dict[str, str]:
        return clean_env(hidden=self.hidden_env)

    @property
    def sandboxed(self) -> bool:
        return self.sandbox is not None

    def touches_for(self, args: dict[str, Any]) -> str:
        """What a command can reach: the sandbox decides (its approval's sentence, tools/base.py `touches`)."""
        if self.sandbox is None:
            return (f"It runs WITHOUT a sandbox ({self.unsandboxed_reason or 'none can start here'}): it can do "
                    f"anything your account can, including reading your files and using the network.")
        if self.network:
            return ("It runs in the sandbox: it can change only this task's workspace and cannot see Hearth's data "
                    "or your keys. It may use the network (this task allows it).")
        return ("It runs in the sandbox: it can change only this task's workspace, cannot see Hearth's data or "
                "your keys, and has no network.")

    def approval_details(self, args: dict[str, Any]) -> dict[str, Any]:
        """What an approval request for this call carries besides its sentence (engine/agent/loop.py puts it in)."""
        command = args.get("command")
        return {
            "sandboxed": self.sandboxed,
            "network": self.network or not self.sandboxed,
            "network_offer": self.sandboxed and not self.network,
            "suggested_rule": suggest_rule(command) if isinstance(command, str) else None,
        }

    def _timeout(self, args: dict[str, Any]) -> tuple[float, str]:
        value = args.get("timeout_seconds")
        if value is None:
            return self.default_timeout, ""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ToolError("timeout_seconds must be a number of seconds.")
        if value <= 0:
            raise ToolError("timeout_seconds must be more than 0.")
        if value > MAX_TIMEOUT:
            return MAX_TIMEOUT, f"[timeout_seconds capped at {int(MAX_TIMEOUT)}.]\n"
        return float(value), ""

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("Argument 'command' must be a non-empty string.")
        if "\x00" in command:
            raise ToolError("The command contains a NUL byte.")
        timeout, note = self._timeout(args)
        if ctx.extra.get("sandboxed") is True and self.sandbox is None:
            raise ToolError("This command was approved to run in the sandbox, but no sandbox can start now, so it "
                            "was not run.")
        argv = ["/bin/sh", "-c", "--", command]  # "--": a command starting with '-' is not a shell option
        if self.sandbox is None:
            launch = Launch(argv)
        else:
            network = self.network or ctx.extra.get("network") is True
            try:
                launch = self.sandbox.launch(SandboxPolicy(ctx.workspace, self.hidden, network), argv)
            except OSError as e:
                raise ToolError(f"Could not prepare the sandbox: {e.strerror or e}.") from None
        if args.get("background") is True and self.background is not None:
            return await self._in_background(command, launch, ctx)
        try:
            return await self._run(launch, ctx, timeout, note)
        finally:
            launch.release()

    async def _in_background(self, command: str, launch: Launch, ctx: ToolContext) -> ToolResult:
        """Start the command as the task's (tools/shell/background.py): the launch is released when it ends."""
        assert self.background is not None
        try:
            row = await self.background.start(ctx.task_id, ctx.turn_id, command, launch, ctx.workspace, self.env(),
                                              self.sandboxed)
        except OSError as e:
            raise ToolError(f"Could not start the command in the background: {e.strerror or e}.") from None
        return ToolResult(f"Started in the background with id {row['id']}. It keeps running after this turn. Read "
                          f"its output with background_command(action=\"read\", id=\"{row['id']}\"), stop it with "
                          f"action \"stop\", or end your turn with wait(command=\"{row['id']}\", note=...) to be "
                          f"woken when it finishes.")

    async def _run(self, launch: Launch, ctx: ToolContext, timeout: float, note: str) -> ToolResult:
        proc, stopped = await spawn(launch, ctx.workspace, self.env())
        # With start_new_session the shell leads its own group, so its pid is the group id.
        pgid = proc.pid
        buf = HeadTail(self.cap)
        assert proc.stdout is not None
        reader = asyncio.create_task(pump(proc.stdout, buf.feed))
        if stopped:
            reader.cancel()
            await asyncio.shield(reap(proc, pgid, reader))
            raise asyncio.CancelledError
        timed_out = leftovers = False
        try:
            try:
                async with asyncio.timeout(timeout):
                    await until_exit(proc, reader)
            except TimeoutError:
                timed_out = True
            # In the sandbox nothing outlives the shell: the kernel ends its PID namespace with it.
            leftovers = not timed_out and self.sandbox is None and group_alive(pgid)
            await kill_group(pgid)
            await settle(proc, reader)
        except BaseException:
            # Cancelled (Stop): leave no process behind, then let the cancellation through.
            reader.cancel()
            await asyncio.shield(reap(proc, pgid, reader))
            raise
        out = note + buf.text()
        notes = []
        if timed_out:
            notes.append(f"[Timed out after {timeout:g} s; the command and its child processes were stopped.]")
        elif proc.returncode is not None and proc.returncode < 0:
            notes.append(f"[Killed by signal {-proc.returncode}.]")
        else:
            notes.append(f"[exit code: {proc.returncode}]")
            if leftovers:
                notes.append("[Background processes left running by the command were stopped.]")
        if not buf.total:
            out += "[no output]"
        if not out.endswith("\n"):
            out += "\n"
        return ToolResult(out + "\n".join(notes), is_error=timed_out)

