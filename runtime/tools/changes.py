"""What a turn changed in its workspace, and what it takes to put it back (runtime/ARCHITECTURE.md, "A turn's
changes").

How: before a turn's first call that may change something, `Watch.take` walks the workspace once (no symlink is
followed) and keeps each regular file's (size, mtime_ns, inode) and an open read-only descriptor on it. After the
turn, `Watch.changes` walks it again: a path that is new is created, one that is gone is deleted, one whose stat
differs is hashed on both sides and is modified when the content differs. The descriptor is what keeps the
earlier content: a file a command deletes (`rm`) or replaces (a rename: file tools, `sed -i`, editors) stays
readable through it, and only then is it copied into the blob store. Unchanged files are never read or copied.
A command that rewrites a file in place (`echo > f`, `cp a f`) changes the very inode the descriptor holds, so
that earlier content is gone: the change is listed and says it cannot be undone. Descriptors are limited by the
process's open-file limit (raised to its hard limit once); files beyond it are watched by stat alone.

The blob store (`<data folder>/changes/`) is content-addressed (files named by SHA-256), so a content kept twice
is stored once. A changed file's new content is kept too when it is small (`DIFF_MAX`), for the diff view.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import ToolError
from runtime.workspace import file_sha256, resolve_in_workspace, write_atomically

DIFF_MAX = 1024 * 1024  # a changed file's new content is kept for the diff view up to this size
_RESERVE_FDS = 1024  # left for everything else the process opens
_held_lock = threading.Lock()
_held = 0  # descriptors all watches hold together
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _fd_budget() -> int:
    """How many descriptors a new watch may hold, the open-file limit raised to its hard limit first."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                soft = want
    except ImportError:  # no such limits to read (Windows)
        soft = 8192
    with _held_lock:
        return max(0, soft - _RESERVE_FDS - _held)


@dataclass(slots=True)
class _Seen:
    size: int
    mtime_ns: int
    ino: int
    fd: int | None  # keeps the content readable after a delete or a rename over it


def _scan(root: Path, look: Callable[[int, str, str], None]) -> set[str]:
    """Call `look(folder_fd, name, path)` for every regular file under `root` (its path relative to it,
    '/'-separated), without following symlinks, the temporary files of file tools' writes left out; return the
    folders under it. Each folder is opened once and its files are looked at relative to it: no full path lookup
    per file, which is what makes 10,000 files cost tens of milliseconds."""
    folders: set[str] = set()
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                folder = os.open(rel or ".", _FOLDER, dir_fd=top)
            except OSError:
                continue
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        name = f"{rel}/{entry.name}" if rel else entry.name
                        with contextlib.suppress(OSError):
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(name)
                                folders.add(name)
                            elif entry.is_file(follow_symlinks=False) and not _is_temp(entry.name):
                                look(folder, entry.name, name)
            finally:
                os.close(folder)
    finally:
        os.close(top)
    return folders


def _walk(root: Path) -> tuple[dict[str, os.stat_result], set[str]]:
    """Every regular file under `root` (see _scan) and its stat; the folders."""
    found: dict[str, os.stat_result] = {}

    def look(folder: int, name: str, path: str) -> None:
        found[path] = os.stat(name, dir_fd=folder, follow_symlinks=False)

    return found, _scan(root, look)


def _is_temp(name: str) -> bool:
    return name.startswith(".hearth-") and name.endswith(".tmp")


class BlobStore:
    """Contents by SHA-256, each stored once: `<root>/<first two hex digits>/<sha256>`."""

    def __init__(self, root: Path):
        self.root = root

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def put_fd(self, fd: int) -> tuple[str, int]:
        """Copy what the descriptor reads (from its start) into the store; (sha256, size)."""
        self.root.mkdir(parents=True, exist_ok=True)
        temp = self.root / f".in-{os.getpid()}-{threading.get_ident()}-{fd}"
        digest, size = hashlib.sha256(), 0
        with open(temp, "wb") as out:
            offset = 0
            while chunk := os.pread(fd, 1024 * 1024, offset):
                digest.update(chunk)
                out.write(chunk)
                offset += len(chunk)
            size = offset
        return self._settle(temp, digest.hexdigest()), size

    def put_file(self, path: Path) -> tuple[str, int]:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return self.put_fd(fd)
        finally:
            os.close(fd)

    def _settle(self, temp: Path, sha: str) -> str:
        target = self.path(sha)
        if target.exists():
            temp.unlink()
        else:
            target.parent.mkdir(exist_ok=True)
            os.replace(temp, target)
        return sha

    def read(self, sha: str) -> bytes | None:
        try:
            return self.path(sha).read_bytes()
        except OSError:
            return None

    def keep_only(self, wanted: set[str]) -> None:
        """Remove every blob not in `wanted`."""
        if not self.root.exists():
            return
        for sub in self.root.iterdir():
            if sub.is_dir():
                for blob in sub.iterdir():
                    if blob.name not in wanted:
                        blob.unlink(missing_ok=True)


class Watch:
    """The workspace before a turn's first change (see the module's docstring)."""

    def __init__(self, root: Path):
        self.root = root
        self.seen: dict[str, _Seen] = {}
        self.folders: set[str] = set()
        self._fds = 0

    def take(self) -> None:
        global _held
        budget = _fd_budget()

        def look(folder: int, name: str, path: str) -> None:
            fd = None
            if self._fds < budget:
                fd = os.open(name, _FILE, dir_fd=folder)
                self._fds += 1
                st = os.fstat(fd)
            else:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            self.seen[path] = _Seen(st.st_size, st.st_mtime_ns, st.st_ino, fd)

        try:
            self.folders = _scan(self.root, look)
        finally:
            with _held_lock:
                _held += self._fds

    def close(self) -> None:
        global _held
        for seen in self.seen.values():
            if seen.fd is not None:
                os.close(seen.fd)
                seen.fd = None
        with _held_lock:
            _held -= self._fds
        self._fds = 0

    def changes(self, blobs: BlobStore) -> list[dict[str, Any]]:
        """What differs now from what `take` saw, the earlier contents kept in `blobs`; then the descriptors are
        closed. Each change: path (a folder's ends with '/'), kind (created, modified, deleted), before_sha/
        before_size (None when there was no file or its content was not kept: `lost` says why), after_sha/after_size
        (None when deleted), after_kept (its content is in `blobs`, for the diff)."""
        try:
            now, folders = _walk(self.root)
            found: list[dict[str, Any] | None] = [
                self._created(rel, st, blobs) for rel, st in now.items() if rel not in self.seen]
            found += [_folder(rel, "created") for rel in folders - self.folders]
            found += [_folder(rel, "deleted") for rel in self.folders - folders]
            for rel, seen in self.seen.items():
                st = now.get(rel)
                if st is None:
                    found.append(self._gone(rel, seen, blobs))
                elif (st.st_size, st.st_mtime_ns, st.st_ino) != (seen.size, seen.mtime_ns, seen.ino):
                    found.append(self._modified(rel, seen, st, blobs))
            return sorted((c for c in found if c is not None), key=lambda c: c["path"])
        finally:
            self.close()

    def _after(self, rel: str, st: os.stat_result, blobs: BlobStore) -> dict[str, Any]:
        path = self.root / rel
        if st.st_size <= DIFF_MAX:
            sha, size = blobs.put_file(path)
            return {"after_sha": sha, "after_size": size, "after_kept": True}
        return {"after_sha": file_sha256(path), "after_size": st.st_size, "after_kept": False}

    def _created(self, rel: str, st: os.stat_result, blobs: BlobStore) -> dict[str, Any]:
        return {"path": rel, "kind": "created", "before_sha": None, "before_size": None, "lost": None,
                **self._after(rel, st, blobs)}

    def _before(self, seen: _Seen, blobs: BlobStore, replaced: bool) -> dict[str, Any]:
        if seen.fd is None:
            return {"before_sha": None, "before_size": seen.size,
                    "lost": "the workspace had more files than Hearth could keep open"}
        if not replaced:
            return {"before_sha": None, "before_size": seen.size,
                    "lost": "a command rewrote it in place, so its earlier content was not kept"}
        sha, size = blobs.put_fd(seen.fd)
        return {"before_sha": sha, "before_size": size, "lost": None}

    def _gone(self, rel: str, seen: _Seen, blobs: BlobStore) -> dict[str, Any]:
        return {"path": rel, "kind": "deleted", **self._before(seen, blobs, replaced=True),
                "after_sha": None, "after_size": None, "after_kept": False}

    def _modified(self, rel: str, seen: _Seen, st: os.stat_result, blobs: BlobStore) -> dict[str, Any] | None:
        before = self._before(seen, blobs, replaced=st.st_ino != seen.ino)
        after = self._after(rel, st, blobs)
        if before["before_sha"] is not None and before["before_sha"] == after["after_sha"]:
            return None  # written again with the same content
        return {"path": rel, "kind": "modified", **before, **after}


def _folder(rel: str, kind: str) -> dict[str, Any]:
    return {"path": f"{rel}/", "kind": kind, "before_sha": None, "before_size": None, "after_sha": None,
            "after_size": None, "after_kept": False, "lost": None}


def is_folder(change: dict[str, Any]) -> bool:
    return bool(change["path"].endswith("/"))


def conflicts(root: Path, changes: list[dict[str, Any]]) -> list[str]:
    """The paths whose file is no longer what the turn left (changed since by the person or a later turn)."""
    return [c["path"] for c in changes if not is_folder(c) and file_sha256(root / c["path"]) != c["after_sha"]]


def restore(root: Path, changes: list[dict[str, Any]], blobs: BlobStore) -> list[str]:
    """Put each file back as it was before the turn: a created one removed, a modified or deleted one written
    from its kept content; then a folder it created is removed when nothing is left in it, and one it deleted is
    made again. Returns the paths that could not be put back (no content kept, the file system refused, a created
    folder someone put other files in), changing nothing there."""
    skipped = []
    files = [c for c in changes if not is_folder(c)]
    # Files first, then created folders from the deepest up: each is empty by the time it is removed.
    folders = sorted((c for c in changes if is_folder(c)), key=lambda c: c["path"].count("/"), reverse=True)
    for change in [*files, *folders]:
        try:
            _put_back(root, change, blobs)
        except (ToolError, OSError, LookupError):
            skipped.append(change["path"])
    return skipped


def _put_back(root: Path, change: dict[str, Any], blobs: BlobStore) -> None:
    path = resolve_in_workspace(root, change["path"].rstrip("/"), for_write=True)
    if is_folder(change):
        if change["kind"] == "created":
            path.rmdir()
        else:
            path.mkdir(parents=True, exist_ok=True)
        return
    if change["kind"] == "created":
        path.unlink(missing_ok=True)
        return
    blob = blobs.path(change["before_sha"]) if change["before_sha"] else None
    if blob is None or not blob.exists():
        raise LookupError(change["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, blob, path.parent / f".hearth-undo-{os.getpid()}.tmp")


def text_diff(change: dict[str, Any], blobs: BlobStore) -> str | None:
    """A unified diff of a changed text file, before → after; None when a side was not kept or is not text."""
    sides: list[list[str]] = []
    for side in ("before", "after"):
        sha = change[f"{side}_sha"]
        if sha is None:
            if change["kind"] == ("created" if side == "before" else "deleted"):
                sides.append([])
                continue
            return None
        data = blobs.read(sha)
        if data is None or b"\x00" in data[:8192]:
            return None
        try:
            sides.append(data.decode("utf-8").splitlines(keepends=True))
        except UnicodeDecodeError:
            return None
    name = change["path"]
    return "".join(difflib.unified_diff(sides[0], sides[1], f"a/{name}", f"b/{name}"))

