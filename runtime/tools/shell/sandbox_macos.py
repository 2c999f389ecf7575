"""The sandbox policy on macOS, as a `sandbox-exec` (Seatbelt) profile. Written and reviewed, never run here (the
project's machines are Linux): keep it in step with the bubblewrap policy in tools/shell/sandbox.py.

The profile denies everything by default and then allows only what a command needs, so there is no rule order
to get wrong (Seatbelt has no "deny after allow" here):
- reading any file except the hidden folders and files (Hearth's data folder, the secret folders in the home),
  each excluded with `require-not`; the task's workspace is allowed again by its own rule, since it lives in the
  data folder;
- writing only in the workspace, in a private temporary folder made for the command (TMPDIR points there; the
  system's /tmp stays read-only), and to /dev/null, /dev/tty and /dev/dtracehelper;
- starting processes, signals to processes in the same sandbox, sysctl reads, and the few Mach services that
  name lookups need; no Mach lookup of the keychain or window server services;
- the network only when the task allows it.
There is no process-count limit: macOS counts `RLIMIT_NPROC` per user, which cannot bound one command.
"""

from __future__ import annotations

import os
from pathlib import Path

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_MACH_SERVICES = ("com.apple.system.opendirectoryd.libinfo", "com.apple.system.logger",
                  "com.apple.system.notification_center", "com.apple.trustd.agent", "com.apple.logd")


def _q(path: Path | str) -> str:
    """A path as a Seatbelt string literal."""
    text = str(path)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _match(path: Path) -> str:
    return f"(subpath {_q(path)})" if path.is_dir() or not path.exists() else f"(literal {_q(path)})"


def profile(workspace: Path, private_tmp: Path, hidden: tuple[Path, ...], network: bool) -> str:
    """The Seatbelt profile for one command. Every path is resolved first: Seatbelt matches the real path, and
    macOS's temporary folders are symlinks (/var/folders/… is /private/var/folders/…), so a rule on the path as
    given would deny the command its own TMPDIR."""
    workspace, private_tmp = Path(os.path.realpath(workspace)), Path(os.path.realpath(private_tmp))
    hidden = tuple(Path(os.path.realpath(p)) for p in hidden)
    hidden_rules = " ".join(f"(require-not {_match(p)})" for p in hidden)
    lines = [
        "(version 1)",
        "(deny default)",
        "(allow process-exec process-fork)",
        "(allow signal (target same-sandbox))",
        "(allow process-info* (target same-sandbox))",
        "(allow sysctl-read)",
        f"(allow mach-lookup {' '.join(f'(global-name {_q(s)})' for s in _MACH_SERVICES)})",
        f"(allow file-read* (require-all (subpath \"/\") {hidden_rules}))" if hidden else "(allow file-read*)",
        f"(allow file-read* file-write* (subpath {_q(workspace)}) (subpath {_q(private_tmp)}))",
        '(allow file-write-data file-ioctl (literal "/dev/null") (literal "/dev/tty") '
        '(literal "/dev/dtracehelper"))',
        "(allow pseudo-tty)",
    ]
    if network:
        lines.append("(allow network* system-socket)")
    return "\n".join(lines) + "\n"


def argv(workspace: Path, private_tmp: Path, hidden: tuple[Path, ...], network: bool, command: list[str]) -> list[str]:
    return [SANDBOX_EXEC, "-p", profile(workspace, private_tmp, hidden, network), *command]
