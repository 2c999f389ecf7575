"""A limit on the number of processes a sandboxed command may run (against fork bombs).

Two kernel mechanisms, chosen by who runs Hearth (verified on Linux 6.18 with bubblewrap 0.8, Debian 12):

- An ordinary user: `RLIMIT_NPROC`, set *inside* the sandbox (`prlimit --nproc=N:N` run by bwrap, which runs in a
  new user namespace because of `--unshare-user`). Since Linux 5.14 that limit counts the processes of the user
  in that namespace only, so the command gets N processes whatever else the person runs. Set outside the
  namespace it would count all of the person's processes, and a desktop session has hundreds.
- root: the kernel never applies `RLIMIT_NPROC` to uid 0, so a `pids` cgroup is used instead when one is
  writable (cgroup v1 `pids` hierarchy, or cgroup v2 with the `pids` controller): one child cgroup per command
  with `pids.max = N`. The spawned process moves itself into it (`echo $$ > cgroup.procs`) before it execs bwrap,
  so nothing it starts can be outside. The cgroup is removed after the command; the kernel needs a moment after
  the last process exits, so removal is retried briefly in the background.

Neither available (root without a writable cgroup, no `prlimit`): no limit, and the sandbox status says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_NAME = "hearth-sandbox"
_JOIN = 'echo $$ > "$0" && exec "$@"'  # run by /bin/sh: join the cgroup, then become the sandbox
_counter = itertools.count(1)


@dataclass
class LimitSlot:
    """How one command is started under the limit: argv before bwrap, bwrap options, argv before the command."""

    outer: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    inner: list[str] = field(default_factory=list)
    release: Callable[[], None] = lambda: None


class RlimitLimit:
    kind = "rlimit"

    def __init__(self, maximum: int, prlimit: str):
        self.maximum = maximum
        self.prlimit = prlimit

    def slot(self) -> LimitSlot:
        n = self.maximum
        return LimitSlot(options=["--unshare-user"], inner=[self.prlimit, f"--nproc={n}:{n}", "--"])


class CgroupLimit:
    kind = "cgroup"

    def __init__(self, maximum: int, base: Path):
        self.maximum = maximum
        self.base = base

    def slot(self) -> LimitSlot:
        group = self.base / f"{os.getpid()}-{next(_counter)}"
        group.mkdir()
        try:
            (group / "pids.max").write_text(str(self.maximum))
        except OSError:
            group.rmdir()
            raise
        return LimitSlot(outer=["/bin/sh", "-c", _JOIN, str(group / "cgroup.procs")], release=lambda: _remove(group))


def _remove(group: Path, tries: int = 50) -> None:
    """Remove a command's cgroup; while its last processes are still being torn down, try again shortly."""
    try:
        group.rmdir()
    except FileNotFoundError:
        return
    except OSError:
        if tries <= 0:
            log.warning("could not remove the sandbox cgroup %s", group)
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nobody to retry; the next start cleans up
            asyncio.get_running_loop().call_later(0.02, _remove, group, tries - 1)


def choose_limit(maximum: int) -> RlimitLimit | CgroupLimit | None:
    """The limit that works for this process, or None (see the module notes)."""
    if maximum <= 0:
        return None
    if os.geteuid() != 0:
        prlimit = shutil.which("prlimit")
        return RlimitLimit(maximum, prlimit) if prlimit else None
    base = _pids_cgroup()
    return CgroupLimit(maximum, base) if base is not None else None


def _own_cgroups() -> dict[str, str]:
    """Controller -> this process's cgroup path ("" is cgroup v2's unified hierarchy)."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            _id, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _pids_cgroup() -> Path | None:
    """A writable folder in a `pids` cgroup hierarchy for the commands' cgroups, prepared; None if there is none."""
    try:
        own = _own_cgroups()
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        root, mount_point, fstype, options = fields[3], fields[4], kind[0], kind[2].split(",")
        if fstype == "cgroup" and "pids" in options:
            path, v2 = own.get("pids"), False
        elif fstype == "cgroup2":
            path, v2 = own.get(""), True
        else:
            continue
        if path is None or not (path + "/").startswith(root.rstrip("/") + "/"):
            continue
        here = Path(mount_point) / path[len(root.rstrip("/")):].lstrip("/")
        base = _prepare(here, v2)
        if base is not None:
            return base
    return None


def _prepare(here: Path, v2: bool) -> Path | None:
    base = here / CGROUP_NAME
    try:
        if v2:
            if "pids" not in (here / "cgroup.controllers").read_text().split():
                return None
            (here / "cgroup.subtree_control").write_text("+pids")
        base.mkdir(exist_ok=True)
        if v2:
            (base / "cgroup.subtree_control").write_text("+pids")
    except OSError:
        return None
    _sweep(base)
    return base


def _sweep(base: Path) -> None:
    """Remove the empty cgroups of commands whose Hearth process is gone (a crash or a kill -9)."""
    for child in base.iterdir():
        pid = child.name.partition("-")[0]
        if child.is_dir() and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                child.rmdir()
