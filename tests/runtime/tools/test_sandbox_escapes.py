"""The escape corpus: sandboxed `run_shell` commands that try to get out, against a real bubblewrap sandbox.

The world lives under /var/tmp, outside the sandbox's private /tmp, so that what the sandbox hides is hidden by
its rules and not merely by the private /tmp: a data folder (a real SQLite database, a key file, memory, another
task's workspace), a home with SSH/GPG/cloud/keyring secrets and ordinary files, and a folder outside both. Every
case, and every network and process test, checks that nothing outside the workspace changed (a snapshot of every
file before and after); the cases also check that no secret reached the command's output.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import socket
import sqlite3
import tempfile
import uuid
from pathlib import Path

import pytest

from runtime.tools.base import ToolContext
from runtime.tools.shell.run_shell import RunShell
from runtime.tools.shell.sandbox import SandboxPolicy, bwrap_argv, detect, hidden_paths
from tests.support.helpers import SANDBOX_PY, connect_command

SECRETS = {
    "db": f"DB-SECRET-{uuid.uuid4().hex}", "key": f"KEY-SECRET-{uuid.uuid4().hex}",
    "ssh": f"SSH-SECRET-{uuid.uuid4().hex}", "gpg": f"GPG-SECRET-{uuid.uuid4().hex}",
    "aws": f"AWS-SECRET-{uuid.uuid4().hex}", "gcloud": f"GCLOUD-SECRET-{uuid.uuid4().hex}",
    "keyring": f"KEYRING-SECRET-{uuid.uuid4().hex}", "netrc": f"NETRC-SECRET-{uuid.uuid4().hex}",
    "memory": f"MEMORY-SECRET-{uuid.uuid4().hex}", "other": f"OTHER-TASK-{uuid.uuid4().hex}",
    "env": f"ENV-SECRET-{uuid.uuid4().hex}",
}


class World:
    def __init__(self, root: Path, host_tmp: Path):
        self.root = root
        self.data = root / "data"
        self.ws = self.data / "workspaces" / "t1"
        self.home = root / "home"
        self.outside = root / "outside"
        self.host_tmp = host_tmp  # in the real /tmp, outside the sandbox's private one
        for d in (self.ws, self.data / "workspaces" / "t2", self.data / "memory", self.outside,
                  self.home / ".ssh", self.home / ".gnupg" / "private-keys-v1.d", self.home / ".aws",
                  self.home / ".config" / "gcloud", self.home / ".local" / "share" / "keyrings",
                  self.home / "Documents"):
            d.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.data / "hearth.sqlite3")
        db.execute("create table t (secret text)")
        db.execute("insert into t values (?)", (SECRETS["db"],))
        db.commit()
        db.close()
        files = {
            self.data / "secrets.json": f'{{"openai": "{SECRETS["key"]}"}}',
            self.data / "settings.json": "{}",
            self.data / "memory" / "notes.md": SECRETS["memory"],
            self.data / "workspaces" / "t2" / "other.txt": SECRETS["other"],
            self.home / ".ssh" / "id_ed25519": SECRETS["ssh"],
            self.home / ".gnupg" / "private-keys-v1.d" / "k.key": SECRETS["gpg"],
            self.home / ".aws" / "credentials": SECRETS["aws"],
            self.home / ".config" / "gcloud" / "credentials.db": SECRETS["gcloud"],
            self.home / ".local" / "share" / "keyrings" / "login.keyring": SECRETS["keyring"],
            self.home / ".netrc": SECRETS["netrc"],
            self.home / ".bashrc": "# bashrc\n",
            self.home / "Documents" / "notes.txt": "my notes\n",
            self.outside / "file.txt": "outside\n",
            host_tmp / "hosttmp-file.txt": "host tmp\n",
        }
        for path, text in files.items():
            path.write_text(text)
        (self.ws / "ok.txt").write_text("inside\n")

    def snapshot(self) -> dict[str, tuple]:
        """Every path outside the workspace with its type, mode, size, mtime, content hash or link target."""
        seen: dict[str, tuple] = {}
        for top in (self.root, self.host_tmp):
            for dirpath, dirnames, filenames in os.walk(top):
                here = Path(dirpath)
                if here == self.ws or self.ws in here.parents:
                    dirnames[:] = []
                    continue
                for name in dirnames + filenames:
                    p = here / name
                    if p == self.ws:
                        continue
                    st = p.lstat()
                    body = (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink()
                            else os.readlink(p) if p.is_symlink() else None)
                    seen[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, body)
        for marker in ("/tmp/hearth-escape-marker", "/var/tmp/hearth-escape-marker"):
            seen[marker] = (os.path.lexists(marker),)
        return seen


@pytest.fixture
async def sandbox():
    status, sb = await detect()
    assert status.available, status.message
    assert status.process_limit == 256, status.message
    return sb


@pytest.fixture
def world(tmp_path, monkeypatch):
    root = Path(tempfile.mkdtemp(prefix="hearth-escape-", dir="/var/tmp"))
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("ESCAPE_TEST_TOKEN", SECRETS["env"])  # in Hearth's own environment, not the command's
    try:
        yield World(root, tmp_path)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def shell(sandbox, world: World, network: bool = False) -> RunShell:
    return RunShell(sandbox=sandbox, hidden=hidden_paths(world.data, home=world.home), network=network,
                    hidden_env=("ESCAPE_TEST_TOKEN",))


def ctx(world: World) -> ToolContext:
    return ToolContext("t1", "u1", world.ws, "c1")


async def run(sandbox, world: World, command: str, **kw) -> str:
    result = await shell(sandbox, world, **kw).run({"command": command, "timeout_seconds": 20}, ctx(world))
    return result.output


CASES = {
    # writes outside the workspace: the home
    "home-file-overwrite": "echo pwned > $HOME/.bashrc",
    "home-file-append": "echo pwned >> $HOME/Documents/notes.txt",
    "home-file-delete": "rm -f $HOME/Documents/notes.txt",
    "home-new-folder": "mkdir $HOME/newdir",
    "home-mtime": "touch -d 2000-01-01 $HOME/.bashrc",
    "home-chmod": "chmod 777 $HOME/Documents/notes.txt",
    "outside-new-file": "touch {outside}/new.txt",
    "outside-python-write": f"{SANDBOX_PY} -c \"open('{{outside}}/py.txt', 'w').write('x')\"",
    "outside-move-in": "mv {outside}/file.txt .",
    # /tmp outside the private one, and /var/tmp
    "host-tmp-overwrite": "echo pwned > {host_tmp}/hosttmp-file.txt",
    "host-tmp-recreate": "mkdir -p {host_tmp} && echo pwned > {host_tmp}/hosttmp-file.txt",
    "tmp-marker": "echo x > /tmp/hearth-escape-marker",
    "var-tmp-marker": "echo x > /var/tmp/hearth-escape-marker",
    # the data folder
    "data-settings": "echo '{{\"x\": 1}}' > {data}/settings.json",
    "data-delete-db": "rm -f {data}/hearth.sqlite3 {data}/secrets.json",
    "dotdot-settings": "echo pwned > ../../settings.json",
    "dotdot-other-workspace": "echo pwned > ../t2/other.txt",
    "dotdot-new-folder": "cd .. && mkdir sneaky",
    "dotdot-plant-in-hidden": "cd ../.. && touch planted && ls",
    # symlinks and hard links planted in the workspace
    "symlink-to-home-file": "ln -s $HOME/.bashrc link && echo pwned > link",
    "symlink-to-outside-dir": "ln -s {outside} outdir && touch outdir/new.txt",
    "symlink-to-db-read": "ln -s ../../hearth.sqlite3 db && cat db",
    "symlink-absolute-key": "ln -s {data}/secrets.json k && cat k",
    "hardlink-outside-file": "ln {outside}/file.txt hard && echo pwned >> hard",
    "hardlink-key-file": "ln {data}/secrets.json keys && cat keys",
    # reads of secrets
    "read-database": "cat {data}/hearth.sqlite3; sqlite3 {data}/hearth.sqlite3 'select * from t'",
    "read-key-file": "cat {data}/secrets.json",
    "read-memory-and-other-task": "cat {data}/memory/notes.md ../t2/other.txt; ls -la {data} {data}/workspaces",
    "read-ssh": "cat $HOME/.ssh/id_ed25519; cp -r $HOME/.ssh ssh_copy; ls -la $HOME/.ssh",
    "read-gpg-aws-gcloud": "cat $HOME/.gnupg/private-keys-v1.d/* $HOME/.aws/credentials $HOME/.config/gcloud/*",
    "read-keyring-netrc": "cat $HOME/.local/share/keyrings/* $HOME/.netrc",
    "grep-the-data-folder": "grep -r SECRET {data} $HOME 2>&1",
    # privileges
    "remount-root-rw": "mount -o remount,rw / && echo pwned > $HOME/.bashrc",
    "unmount-the-cover": "umount {data}; cat {data}/secrets.json",
    "mount-over-outside": "mount -t tmpfs none {outside} && touch {outside}/x",
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_escape_attempt_is_refused_or_contained(sandbox, world, case):
    before = world.snapshot()
    command = CASES[case].format(data=world.data, outside=world.outside, host_tmp=world.host_tmp)
    output = await run(sandbox, world, command)
    assert world.snapshot() == before, output
    leaked = [name for name, secret in SECRETS.items() if secret in output]
    assert leaked == [], output
    for path in world.ws.rglob("*"):  # nothing secret was copied in either
        if path.is_file() and not path.is_symlink():
            assert not any(s in path.read_text(errors="replace") for s in SECRETS.values()), path
    assert (world.ws / "ok.txt").read_text() == "inside\n"


async def test_the_workspace_and_private_tmp_are_writable_and_the_rest_readable(sandbox, world):
    before = world.snapshot()
    out = await run(sandbox, world, "echo hi > new.txt && mkdir -p sub && echo deep > sub/f && echo t > /tmp/x && "
                                    "cat /tmp/x $HOME/Documents/notes.txt && pwd")
    assert out.splitlines()[:3] == ["t", "my notes", str(world.ws)]
    assert (world.ws / "new.txt").read_text() == "hi\n" and (world.ws / "sub/f").read_text() == "deep\n"
    assert world.snapshot() == before
    # bwrap's own init, still exiting when the shell is done, is not taken for a process the command left behind
    outputs = {await run(sandbox, world, "true") for _ in range(40)}
    assert outputs == {"[no output]\n[exit code: 0]"}


# -- network --


async def test_a_loopback_listener_outside_is_unreachable(sandbox, world, listener):
    port, accepted = listener
    before = world.snapshot()
    out = await run(sandbox, world, connect_command(port))
    assert "hello from the host" not in out and "Connection refused" in out
    await asyncio.sleep(0.1)
    assert accepted == []
    assert world.snapshot() == before, out


async def test_udp_ipv6_and_abstract_sockets_outside_are_unreachable(sandbox, world, listener):
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0hearth-escape-{uuid.uuid4().hex}"
    abstract.bind(name)
    abstract.listen()
    abstract.setblocking(False)
    try:
        port = udp.getsockname()[1]
        code = (f"import socket\n"
                f"socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))\n"
                f"u = socket.socket(socket.AF_UNIX)\n"
                f"try:\n    u.connect({name!r}); print('ABSTRACT CONNECTED')\nexcept OSError as e: print(e)\n"
                f"try:\n    socket.create_connection(('::1', {listener[0]}), timeout=2); print('V6 CONNECTED')\n"
                f"except OSError as e: print(e)\n")
        (world.ws / "probe.py").write_text(code)
        before = world.snapshot()
        out = await run(sandbox, world, f"{SANDBOX_PY} probe.py")
        assert "CONNECTED" not in out and out.endswith("[exit code: 0]"), out  # the probe ran, and got nowhere
        assert world.snapshot() == before, out
        with pytest.raises(BlockingIOError):
            udp.recvfrom(10)
        with pytest.raises(BlockingIOError):
            abstract.accept()
    finally:
        udp.close()
        abstract.close()


async def test_the_listener_is_reached_when_the_task_allows_the_network(sandbox, world, listener):
    port, accepted = listener
    before = world.snapshot()
    out = await run(sandbox, world, connect_command(port), network=True)
    assert "hello from the host" in out
    assert accepted == [1]
    assert world.snapshot() == before, out  # the network opens, the files stay closed


# -- processes --


def _sleep_token() -> str:
    """A `sleep` argument no other process has: about 1000 s, with unique decimals."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


def _processes(token: str) -> list[int]:
    """Live (non-zombie) processes whose command line holds `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmd and state != b"Z":
            found.append(int(entry))
    return found


async def _watch(token: str, peak: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], len(await asyncio.to_thread(_processes, token)))
        await asyncio.sleep(0.05)


async def test_a_fork_bomb_is_bounded_by_the_process_limit_and_cleaned_up(sandbox, world):
    token = f"bomb{uuid.uuid4().hex[:8]}"
    peak, stop = [0], asyncio.Event()
    before = world.snapshot()
    watcher = asyncio.create_task(_watch(token, peak, stop))
    result = await shell(sandbox, world).run(
        {"command": f"b() {{ b | b & }}; b # {token}", "timeout_seconds": 4}, ctx(world))
    stop.set()
    await watcher
    assert peak[0] <= 256 + 2, f"{peak[0]} processes at once"
    assert _processes(token) == []
    assert "exit code" in result.output or "Timed out" in result.output
    assert world.snapshot() == before, result.output


async def test_more_processes_than_the_limit_fail_to_start(sandbox, world):
    token = _sleep_token()
    before = world.snapshot()
    out = await run(sandbox, world, f"i=0; while [ $i -lt 400 ]; do sleep {token} & i=$((i+1)); done; echo all")
    assert "all" not in out.splitlines() and "fork" in out.lower(), out
    assert _processes(token) == []
    assert world.snapshot() == before, out


async def test_daemons_that_leave_the_process_group_are_killed_with_the_sandbox(sandbox, world):
    token = _sleep_token()
    cmd = (f"(setsid sleep {token} &); nohup sleep {token} >/dev/null 2>&1 & "
           f"setsid sh -c 'exec sleep {token}' </dev/null >/dev/null 2>&1 & echo started")
    before = world.snapshot()
    out = await run(sandbox, world, cmd)
    assert out.startswith("started")
    assert _processes(token) == []
    assert world.snapshot() == before, out


async def test_stop_kills_every_process_of_a_running_sandboxed_command(sandbox, world):
    token = _sleep_token()
    cmd = f"(setsid sleep {token} &); sleep {token} & echo up > up.txt; sleep {token}"
    before = world.snapshot()
    task = asyncio.create_task(shell(sandbox, world).run({"command": cmd}, ctx(world)))
    for _ in range(250):
        if (world.ws / "up.txt").exists() and len(_processes(token)) >= 3:
            break
        await asyncio.sleep(0.02)
    assert len(_processes(token)) >= 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _processes(token) == []
    assert world.snapshot() == before


async def test_the_environment_of_processes_outside_cannot_be_read(sandbox, world):
    # Hearth's own process holds provider keys in its environment; here a stand-in started with a secret in its.
    holder = await asyncio.create_subprocess_exec("sleep", "1000", env={**os.environ, "SOME_KEY": SECRETS["env"]})
    try:
        before = world.snapshot()
        out = await run(sandbox, world, f"cat /proc/{holder.pid}/environ; cat /proc/*/environ | tr '\\0' '\\n'; env")
        assert SECRETS["env"] not in out
        assert world.snapshot() == before, out
    finally:
        holder.kill()
        await holder.wait()


async def test_processes_outside_cannot_be_seen_or_signalled(sandbox, world):
    victim = await asyncio.create_subprocess_exec("sleep", "1000")
    try:
        before = world.snapshot()
        out = await run(sandbox, world, f"kill -9 {victim.pid}; cat /proc/{victim.pid}/cmdline; ls /proc | wc -l")
        assert "No such" in out and world.snapshot() == before, out
        assert victim.returncode is None
        await asyncio.sleep(0.1)
        assert victim.returncode is None and Path(f"/proc/{victim.pid}").exists()
    finally:
        victim.kill()
        await victim.wait()


async def test_secret_folders_inside_the_workspace_stay_hidden(sandbox, world):
    # A workspace that holds a home (a task pointed at it): its .ssh is covered after the workspace is mounted.
    home_ws = world.ws / "home"
    shutil.copytree(world.home, home_ws, symlinks=True)
    shell = RunShell(sandbox=sandbox, hidden=hidden_paths(world.data, home=home_ws))
    result = await shell.run({"command": "cat home/.ssh/id_ed25519 home/.aws/credentials; cat home/.bashrc; "
                                         "echo x > home/.ssh/new"}, ctx(world))
    assert SECRETS["ssh"] not in result.output and SECRETS["aws"] not in result.output
    assert "# bashrc" in result.output and not (home_ws / ".ssh" / "new").exists()


async def test_with_the_network_the_resolver_config_stays_readable_where_it_lives(sandbox, world, tmp_path):
    # systemd-resolved links /etc/resolv.conf into /run, which the sandbox replaces; here the link goes to /tmp.
    real = tmp_path / "stub-resolv.conf"
    real.write_text("nameserver 127.0.0.53\n")
    link = world.root / "resolv.conf"
    link.symlink_to(real)
    policy = SandboxPolicy(world.ws, network=True)
    argv = [*bwrap_argv("bwrap", policy, resolv_conf=str(link)), "cat", str(real)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert out == b"nameserver 127.0.0.53\n"
    assert str(real) not in bwrap_argv("bwrap", SandboxPolicy(world.ws), resolv_conf=str(link))  # no network
