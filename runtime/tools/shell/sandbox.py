"""The sandbox `run_shell` commands run in (runtime/ARCHITECTURE.md, "Sandbox").

Linux, with bubblewrap (`bwrap`; verified with 0.8 on Debian 12, as root and as an ordinary user):
- the whole file system read-only (`--ro-bind / /`); writable only the task's workspace and a private `/tmp` (a
  fresh tmpfs per command: what a command leaves there is gone afterwards);
- not visible at all (an empty read-only tmpfs over folders, /dev/null over files): Hearth's data folder (the
  database, the key file, memory, the other tasks' workspaces; the task's own workspace is mounted back inside),
  the usual secret folders of the home (SECRET_HOME_PATHS: SSH, GPG, cloud credentials, keyrings) and `/run`
  (session and system bus sockets, the keyring daemon, container engine sockets);
- its own PID, IPC, UTS and cgroup namespaces: it sees no other process (so not Hearth's environment, which holds
  keys), and when its first process dies the kernel kills everything else in the sandbox, daemons that left the
  process group included; `--die-with-parent` ties that to the process Hearth started;
- no network (a network namespace with only its own loopback) unless the task allows it; no capabilities (bwrap
  runs as root in CI: without `--cap-drop ALL` root could remount the file system);
- a limit on the number of processes (tools/shell/sandbox_limits.py).
The command keeps Hearth's process group for Stop (tools/shell/run_shell.py): bwrap is started in it and forwards
nothing, killing the group kills bwrap, and with it the whole sandbox.

macOS: the same policy as a sandbox-exec profile (tools/shell/sandbox_macos.py), not run on our machines. Windows and
anything else: no sandbox.

`detect()` says whether a sandbox can start, by starting one (so a missing program, disabled user namespaces or
an AppArmor restriction show up the same way as at run time), and explains it in plain words. The answer is
cached per program (and its modification time), so it costs one start per process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import sandbox_macos
from .sandbox_limits import CgroupLimit, LimitSlot, RlimitLimit, choose_limit

DEFAULT_MAX_PROCESSES = 256
PROBE_TIMEOUT = 10.0
SECRET_HOME_PATHS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".config/gh", ".netrc",
    ".git-credentials", ".pypirc", ".npmrc", ".password-store", ".local/share/keyrings", ".local/share/kwalletd",
    ".local/share/python_keyring", "Library/Keychains",
)
PROTECTS = ("A command can change files only in its task's workspace folder and a private /tmp that is emptied "
            "after it; Hearth's data folder and your SSH, GPG, cloud and keyring files are hidden from it")
FALLBACK = ("Tasks in full auto therefore ask before each command, unless you accept the risk for a task; "
            "every approval says whether the command runs in a sandbox.")


@dataclass(frozen=True)
class SandboxPolicy:
    workspace: Path
    hidden: tuple[Path, ...] = ()  # folders and files a command must not see
    network: bool = False


@dataclass(frozen=True)
class SandboxStatus:
    """What Settings shows: whether commands run sandboxed, in plain words."""

    available: bool
    mechanism: str | None  # "bubblewrap" | "sandbox-exec"
    message: str
    process_limit: int | None = None
    reason: str | None = None  # why there is none, in a few words ("bubblewrap is not installed")
    detail: str | None = None  # what the sandbox program said when it failed


@dataclass
class Launch:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the command's environment
    release: Callable[[], None] = lambda: None  # after the command: remove what the launch made


def hidden_paths(data_dir: Path, home: Path | None = None) -> tuple[Path, ...]:
    """Hearth's data folder and the secret folders of the home that exist, resolved."""
    home = Path.home() if home is None else home
    found = [Path(os.path.realpath(data_dir))]
    for rel in SECRET_HOME_PATHS:
        path = home / rel
        if path.exists():
            found.append(Path(os.path.realpath(path)))
    return tuple(dict.fromkeys(found))


class Sandbox:
    """A sandbox that starts on this machine (`detect()` returned it)."""

    def __init__(self, mechanism: str, program: str, limit: RlimitLimit | CgroupLimit | None):
        self.mechanism = mechanism
        self.program = program
        self.limit = limit

    def launch(self, policy: SandboxPolicy, command: list[str]) -> Launch:
        if self.mechanism == "sandbox-exec":
            tmp = Path(tempfile.mkdtemp(prefix="hearth-cmd-"))
            ws = Path(os.path.realpath(policy.workspace))
            return Launch(sandbox_macos.argv(ws, tmp, policy.hidden, policy.network, command),
                          {"TMPDIR": str(tmp)}, lambda: shutil.rmtree(tmp, ignore_errors=True))
        slot = self.limit.slot() if self.limit is not None else LimitSlot()
        return Launch([*slot.outer, *bwrap_argv(self.program, policy, slot.options), *slot.inner, *command],
                      release=slot.release)


def bwrap_argv(program: str, policy: SandboxPolicy, options: Sequence[str] = (),
               resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    """bwrap and its options for `policy` (the command follows)."""
    ws = os.path.realpath(policy.workspace)
    argv = [program, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            *options, "--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/run"]
    if not policy.network:
        argv.append("--unshare-net")
    elif (resolv := os.path.realpath(resolv_conf)).startswith(("/run/", "/tmp/")) and os.path.isfile(resolv):
        # Name lookups need it, and systemd-resolved or resolvconf keep it in /run, which the sandbox replaces.
        argv += ["--ro-bind", resolv, resolv]
    # A hidden folder that holds the workspace is covered first and the workspace mounted back into it; any
    # other hidden path is covered after, so one inside the workspace stays hidden too.
    around = [p for p in policy.hidden if _contains(p, ws)]
    inside = [p for p in policy.hidden if not _contains(p, ws)]
    covered: list[str] = []
    for path in around:
        argv += ["--tmpfs", str(path)]
        covered.append(str(path))
    argv += ["--bind", ws, ws]
    for path in inside:
        if path.is_dir():
            argv += ["--tmpfs", str(path)]
            covered.append(str(path))
        elif path.exists():
            argv += ["--ro-bind", "/dev/null", str(path)]
    for folder in covered:  # an empty, read-only tmpfs: nothing can be hidden or planted there
        argv += ["--remount-ro", folder]
    return [*argv, "--chdir", ws]


def _contains(folder: Path, path: str) -> bool:
    return path == str(folder) or path.startswith(str(folder).rstrip("/") + "/")


_cache: dict[tuple, tuple[SandboxStatus, Sandbox | None]] = {}


async def detect(program: str = "bwrap", max_processes: int = DEFAULT_MAX_PROCESSES
                 ) -> tuple[SandboxStatus, Sandbox | None]:
    """Whether commands can run sandboxed here, and the sandbox to run them in (None when they cannot)."""
    if sys.platform == "win32":
        return _unavailable("Windows has no sandbox Hearth can use yet"), None
    if sys.platform == "darwin":
        found, mechanism = (sandbox_macos.SANDBOX_EXEC if os.path.exists(sandbox_macos.SANDBOX_EXEC) else None,
                            "sandbox-exec")
        missing, how = "macOS's sandbox-exec is missing", ""
    else:
        found, mechanism = shutil.which(program), "bubblewrap"
        missing = f"bubblewrap (the '{program}' program) is not installed"
        how = "Install the 'bubblewrap' package (for example: sudo apt install bubblewrap). "
    if found is None:
        return _unavailable(missing, how), None
    try:
        stamp = os.stat(found).st_mtime_ns
    except OSError:
        stamp = 0
    key = (found, stamp, max_processes, os.geteuid())
    if key not in _cache:
        _cache[key] = await _probe(mechanism, found, max_processes)
    return _cache[key]


async def _probe(mechanism: str, program: str, max_processes: int) -> tuple[SandboxStatus, Sandbox | None]:
    limit = choose_limit(max_processes) if mechanism == "bubblewrap" else None
    error = await _starts(Sandbox(mechanism, program, limit))
    if error is not None and limit is not None:  # the limit's part failed: a sandbox without it still protects
        limit = None
        error = await _starts(Sandbox(mechanism, program, None))
    if error is not None:
        return _why_not(mechanism, error), None
    if limit is not None:
        limits = f"; it may run at most {limit.maximum} processes at once"
    else:
        limits = "; the number of processes it may start is not limited on this system"
    message = (f"Commands run in a sandbox ({mechanism}). {PROTECTS}; it has no network unless its task allows "
               f"it{limits}.")
    return SandboxStatus(True, mechanism, message, limit.maximum if limit else None), Sandbox(mechanism, program,
                                                                                              limit)


async def _starts(sandbox: Sandbox) -> str | None:
    """None when a sandboxed `true` runs; else what went wrong."""
    with tempfile.TemporaryDirectory(prefix="hearth-probe-") as ws:
        launch = sandbox.launch(SandboxPolicy(Path(ws)), ["/bin/sh", "-c", "true"])
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
            try:
                _, err = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return f"it did not start within {PROBE_TIMEOUT:g} s"
        except OSError as exc:
            return exc.strerror or str(exc)
        finally:
            launch.release()
    if proc.returncode == 0:
        return None
    lines = err.decode(errors="replace").strip().splitlines()
    return (lines[-1] if lines else f"exit status {proc.returncode}")[:300]


def _why_not(mechanism: str, error: str) -> SandboxStatus:
    lowered = error.lower()
    if any(s in lowered for s in ("namespace", "uid map", "operation not permitted", "permission denied")):
        reason = f"this system does not let {mechanism} create the namespaces it needs"
        how = "User namespaces are disabled, or restricted (for example by AppArmor). "
    else:
        reason, how = f"{mechanism} is installed but could not start a sandbox here", ""
    return _unavailable(reason, how, error)


def _unavailable(reason: str, how: str = "", detail: str | None = None) -> SandboxStatus:
    message = (f"Commands are not sandboxed: {reason}, so a command could do anything your account can. {how}"
               f"{FALLBACK}")
    return SandboxStatus(False, None, message, reason=reason, detail=detail)
