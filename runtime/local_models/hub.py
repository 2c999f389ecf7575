"""Downloading one GGUF file from the Hugging Face Hub, on huggingface_hub's own pieces.

    ref = parse_hub_ref("bartowski/Qwen2.5-3B-Instruct-GGUF/Qwen2.5-3B-Instruct-Q4_K_M.gguf")
    remote = fetch_metadata(ref, endpoint=HUB_ENDPOINT, token=None)     # HEAD .../resolve/main/FILE
    path = download(ref, remote, cache_dir, token=None, on_bytes=..., cancel=threading.Event())

Decisions:
- Metadata comes from `get_hf_file_metadata` (the HEAD on the resolve URL: `X-Repo-Commit`, `X-Linked-Etag` =
  the LFS sha256, `X-Linked-Size`, the CDN `Location`), the body from `file_download.http_get`, which resumes
  by itself (a `Range` request) when the connection drops mid-file. `hf_hub_download` is not used: in
  huggingface_hub 2.4 it writes to a process-unique temporary file and deletes it on any failure, so a quit or a
  cancel would lose everything downloaded. Here the partial file is `blobs/<etag>.incomplete` in the library's
  own cache folder and a later pull resumes it, from another process too.
- The cache has huggingface_hub's layout (`models--OWNER--REPO/blobs/<etag>`, `snapshots/<commit>/<file>` a
  relative symlink to the blob, `refs/<revision>`), under the data folder, never the user's ~/.cache.
- The sha256 is computed while the bytes arrive (a second thread; hashlib releases the GIL), over the resumed
  part first, and compared with the Hub's after the last byte. A mismatch deletes the file. A file outside LFS
  (etag = git blob sha1) is checked against that instead.
- The token goes only to the Hub itself, never to a CDN host the Hub redirects to. No token: none is sent
  (`token=False`, so a token huggingface_hub might find in the environment is not used either).
- Every failure becomes a `ModelError` with one readable sentence, never the library's words or an exception's
  class (those go to the log); whether bytes were kept is said by the caller, which knows (services/local_models.py).
  `DownloadCancelled` keeps the partial file.
- The body is read in 1 MB chunks instead of the library's 10 MB (`_tune_library`): progress, pausing and a
  resume after a dropped connection all work at that granularity.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal
from urllib.parse import urlsplit

from ..errors import DownloadCancelled, ModelError
from .machine import free_disk_bytes, human_bytes

log = logging.getLogger(__name__)

HUB_ENDPOINT = "https://huggingface.co"
DISK_MARGIN = 100_000_000  # room left on the disk after a download
METADATA_TIMEOUT = 15.0
READ_CHUNK = 1 << 20
PARTIAL_SUFFIX = ".incomplete"
_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
_URL = re.compile(rf"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/({_REPO})/(?:blob|resolve)/([^/]+)/(.+)$")
_PLAIN = re.compile(rf"^(?:(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/)?({_REPO})/(.+)$")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class HubFile:
    repo: str
    file: str
    revision: str = "main"

    def __str__(self) -> str:
        return f"{self.repo}/{self.file}"


@dataclass(frozen=True, slots=True)
class RemoteFile:
    url: str  # where the bytes are (the Hub's CDN location)
    etag: str
    commit: str
    size: int | None
    sha256: str | None  # the LFS sha256, when the file is in LFS


def hub_endpoint() -> str:
    """`HF_ENDPOINT` when set (a mirror, or the tests' loopback hub), read at call time; else the Hub."""
    return (os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")


def parse_hub_ref(text: str) -> HubFile:
    """`OWNER/REPO/FILE.gguf`, or a huggingface.co URL of the file (…/blob/REV/FILE or …/resolve/REV/FILE)."""
    t = text.strip()
    if m := _URL.match(t):
        repo, revision, file = m.group(1), m.group(2), m.group(3)
    elif m := _PLAIN.match(t):
        repo, revision, file = m.group(1), "main", m.group(2)
    else:
        raise ModelError(
            f"{t!r} is not a catalog model or a Hugging Face file. Give OWNER/REPO/FILE.gguf, for example "
            "bartowski/Qwen2.5-3B-Instruct-GGUF/Qwen2.5-3B-Instruct-Q4_K_M.gguf."
        )
    if not file.lower().endswith(".gguf"):
        raise ModelError(f"Hearth runs GGUF files; {file!r} is not one. Pick a .gguf file of {repo}.")
    if _SPLIT.search(file):
        raise ModelError(f"{file} is one part of a split model, which Hearth cannot run yet; pick a single file.")
    if ".." in file.split("/"):
        raise ModelError(f"{file!r} is not a file name inside a repository.")
    return HubFile(repo, file, revision)


def _hub_error(exc: BaseException, ref: HubFile, endpoint: str) -> ModelError:
    from huggingface_hub import errors as hf

    if isinstance(exc, hf.GatedRepoError):
        return ModelError(
            f"{ref.repo} is gated: accept its terms on huggingface.co, then add your Hugging Face token in "
            "Settings ▸ Models (it is kept in the system keyring)."
        )
    if isinstance(exc, hf.RevisionNotFoundError):
        return ModelError(f"{ref.repo} has no revision {ref.revision!r}.")
    if isinstance(exc, hf.RemoteEntryNotFoundError | hf.EntryNotFoundError):
        return ModelError(f"{ref.repo} has no file {ref.file!r}. Check the file name on its Files page.")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return ModelError(f"There is no public model repository {ref.repo!r} on Hugging Face (or it is private).")
    if isinstance(exc, hf.HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "?"
        return ModelError(f"Hugging Face answered with an error (HTTP {status}) for {ref}. Try again later.")
    log.warning("download of %s failed: %r", ref, exc)  # the library's words, for the log only
    return ModelError(f"Hearth could not reach Hugging Face ({urlsplit(endpoint).netloc or endpoint}). Check the "
                      "internet connection, then try again.")


def _tune_library() -> None:
    """huggingface_hub logs its retries ("Trying to resume download...") as warnings: progress says enough.
    It reads the body in 10 MB chunks: on a 2 MB/s line that is a progress update (and a chance to pause)
    every 5 s, and up to 10 MB lost on a dropped connection. READ_CHUNK gives both every half second."""
    from huggingface_hub import constants

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    constants.DOWNLOAD_CHUNK_SIZE = READ_CHUNK


def fetch_metadata(ref: HubFile, *, endpoint: str, token: str | None) -> RemoteFile:
    """The file's commit, etag (LFS sha256), size and download location, from one HEAD request."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    _tune_library()
    url = hf_hub_url(ref.repo, ref.file, revision=ref.revision, endpoint=endpoint)
    try:
        meta = get_hf_file_metadata(url, token=token or False, timeout=METADATA_TIMEOUT, endpoint=endpoint)
    except Exception as exc:
        raise _hub_error(exc, ref, endpoint) from exc
    if not meta.commit_hash or not meta.etag:
        raise ModelError(f"The server at {endpoint} does not answer like the Hugging Face Hub (no commit or etag).")
    sha256 = meta.etag if _SHA256.match(meta.etag) else None
    return RemoteFile(meta.location, meta.etag, meta.commit_hash, meta.size, sha256)


def storage_folder(cache_dir: Path, repo: str) -> Path:
    return cache_dir / ("models--" + repo.replace("/", "--"))


def partial_path(cache_dir: Path, ref: HubFile, remote: RemoteFile) -> Path:
    """Where the file's bytes are written until it is complete and verified."""
    return storage_folder(cache_dir, ref.repo) / "blobs" / (remote.etag + PARTIAL_SUFFIX)


class DownloadStop(threading.Event):
    """Set to stop a download at its next chunk: a pause keeps the partial file; with `discard` it is deleted."""

    discard = False


def download(
    ref: HubFile,
    remote: RemoteFile,
    cache_dir: Path,
    *,
    token: str | None,
    endpoint: str,
    on_bytes: Callable[[int, int | None], None],
    cancel: threading.Event,
    expected_sha256: str = "",
) -> Path:
    """The file in the cache (downloading or resuming it first), verified. Blocks: run it in a thread."""
    storage = storage_folder(cache_dir, ref.repo)
    blob = storage / "blobs" / remote.etag
    pointer = storage / "snapshots" / remote.commit / ref.file
    if pointer.is_file():
        return pointer
    if expected_sha256 and remote.sha256 and expected_sha256 != remote.sha256:
        raise ModelError(f"{ref} changed on the Hub since this Hearth version listed it; its hash differs.")
    if not blob.is_file():
        _fetch_blob(ref, remote, blob, token=token, endpoint=endpoint, on_bytes=on_bytes, cancel=cancel,
                    sha256=remote.sha256 or expected_sha256)
    _link(blob, pointer)
    if ref.revision != remote.commit:
        refs = storage / "refs" / ref.revision
        refs.parent.mkdir(parents=True, exist_ok=True)
        refs.write_text(remote.commit, encoding="ascii")
    return pointer


def _fetch_blob(ref: HubFile, remote: RemoteFile, blob: Path, *, token: str | None, endpoint: str,
                on_bytes: Callable[[int, int | None], None], cancel: threading.Event, sha256: str) -> None:
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    if not sha256 and not _SHA1.match(remote.etag):
        raise ModelError(f"The Hub published no checksum for {ref}, so Hearth cannot verify it; not downloaded.")
    blob.parent.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + PARTIAL_SUFFIX)
    have = partial.stat().st_size if partial.exists() else 0
    if remote.size is not None and have > remote.size:
        partial.unlink()
        have = 0
    if remote.size is not None:
        need, free = remote.size - have + DISK_MARGIN, free_disk_bytes(blob.parent)
        if free < need:
            raise ModelError(
                f"Not enough free disk space for {ref.file}: {human_bytes(need)} needed, {human_bytes(free)} "
                f"free in {blob.parent}."
            )
    same_host = urlsplit(remote.url).netloc == urlsplit(endpoint).netloc
    headers = build_hf_headers(token=token if (token and same_host) else False)
    new_hasher = hashlib.sha256 if sha256 else _git_blob_hasher(remote.size)
    with open(partial, "ab") as f:
        writer = _HashingWriter(f, partial, have, new_hasher, cancel, ref.file)
        progress = _progress_bar_class(on_bytes)
        try:
            # Typed BinaryIO, the file is only written, told, sought and truncated: _HashingWriter does those.
            http_get(remote.url, writer, resume_size=have, headers=headers,  # type: ignore[arg-type]
                     expected_size=remote.size, displayed_filename=ref.file, tqdm_class=progress)
        except DownloadCancelled:
            writer.abandon()
            if not getattr(cancel, "discard", False):
                raise
            digest = None
        except Exception as exc:
            writer.abandon()
            raise _download_error(exc, ref, partial, endpoint) from exc
        else:
            digest = writer.finish()
    if digest is None:  # cancelled: deleted once closed (Windows cannot delete an open file)
        partial.unlink(missing_ok=True)
        raise DownloadCancelled(ref.file, discarded=True)
    expected = sha256 or remote.etag
    if digest != expected:
        partial.unlink(missing_ok=True)
        raise ModelError(
            f"The downloaded {ref.file} does not match the checksum the Hub published (sha256 {expected[:12]}…, "
            f"got {digest[:12]}…); it was deleted. Try again; if it repeats, the mirror serves a damaged file."
        )
    os.replace(partial, blob)
    with contextlib.suppress(OSError):
        os.chmod(blob, 0o644)


def _download_error(exc: BaseException, ref: HubFile, partial: Path, endpoint: str) -> ModelError:
    from huggingface_hub.errors import HfHubHTTPError

    if not isinstance(exc, OSError) or isinstance(exc, HfHubHTTPError):
        return _hub_error(exc, ref, endpoint)
    if "Consistency check failed" in str(exc):  # http_get: the body ended at another size than announced
        partial.unlink(missing_ok=True)
        return ModelError(f"The download of {ref.file} came out the wrong size; it was deleted. Try again.")
    return ModelError(f"Could not write {partial}: {exc.strerror or exc}.")


def _link(blob: Path, pointer: Path) -> None:
    pointer.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except FileExistsError:
        pass
    except OSError:  # no symlinks here (Windows without developer mode): the snapshot holds the file itself
        shutil.move(blob, pointer)


def remove_file(cache_dir: Path, repo: str, pointer: Path) -> None:
    """Delete a downloaded file: its snapshot entry, and its blob unless another snapshot uses it."""
    storage = storage_folder(cache_dir, repo)
    blob = pointer.resolve() if pointer.is_symlink() else None
    pointer.unlink(missing_ok=True)
    snapshots = storage / "snapshots"
    others = [p for p in snapshots.rglob("*") if p.is_symlink() and p.resolve() == blob] if blob else []
    if blob is not None and not others:
        blob.unlink(missing_ok=True)
    for folder in sorted((p for p in snapshots.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty
    if snapshots.exists() and not any(snapshots.iterdir()) and not any((storage / "blobs").glob("*" + PARTIAL_SUFFIX)):
        shutil.rmtree(storage, ignore_errors=True)


def _git_blob_hasher(size: int | None) -> Callable[[], Any]:
    """What a file outside LFS is named by: git's blob sha1 (`blob <size>\\0` + content)."""
    if size is None:
        raise ModelError("The Hub gave neither a checksum nor a size for this file; not downloaded.")

    def new() -> Any:
        hasher = hashlib.sha1(usedforsecurity=False)
        hasher.update(b"blob %d\0" % size)
        return hasher

    return new


def _progress_bar_class(on_bytes: Callable[[int, int | None], None]) -> type:
    """A stand-in for the tqdm class `http_get` reports to: forwards (done, total) and draws nothing."""

    class Progress:
        def __init__(self, *, total: int | None = None, initial: int = 0, **_kwargs: object):
            self.total, self.n = total, initial
            on_bytes(self.n, self.total)

        def __enter__(self) -> Progress:
            return self

        def __exit__(self, *exc: object) -> Literal[False]:
            return False

        def update(self, n: int) -> None:
            self.n += n
            on_bytes(self.n, self.total)

    return Progress


class _HashingWriter:
    """The file `http_get` writes to: appends to the partial file and hands each chunk to a hashing thread
    (which first hashes the part downloaded before). Raises `DownloadCancelled` once asked to stop."""

    def __init__(self, f: BinaryIO, path: Path, have: int, new_hasher: Callable[[], Any], cancel: threading.Event,
                 name: str):
        self._f, self._path, self._cancel, self._name = f, path, cancel, name
        self._new_hasher = new_hasher
        self._hasher = new_hasher()
        self._chunks: queue.Queue[bytes | int | None] = queue.Queue(maxsize=4)
        self._thread = threading.Thread(target=self._hash, args=(have,), name="hearth-hash", daemon=True)
        self._thread.start()

    def _hash(self, have: int) -> None:
        self._hash_file_head(have)
        while (item := self._chunks.get()) is not None:
            if isinstance(item, int):  # the file was cut back to `item` bytes: hash it again from the start
                self._hasher = self._new_hasher()
                self._hash_file_head(item)
            else:
                self._hasher.update(item)

    def _hash_file_head(self, n: int) -> None:
        if not n:
            return
        with open(self._path, "rb") as f:
            while n > 0 and (block := f.read(min(n, 8 << 20))):
                self._hasher.update(block)
                n -= len(block)

    def write(self, chunk: bytes) -> int:
        written = self._f.write(chunk)
        self._chunks.put(chunk)
        if self._cancel.is_set():
            raise DownloadCancelled(self._name)
        return written

    def tell(self) -> int:
        return self._f.tell()

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def truncate(self, size: int | None = None) -> int:
        """The server ignored `Range` and sends the whole file again: start the hash over."""
        self._f.flush()
        end = self._f.truncate(size)
        self._chunks.put(end)
        return end

    def finish(self) -> str:
        self._f.flush()
        self._chunks.put(None)
        self._thread.join()
        return self._hasher.hexdigest()

    def abandon(self) -> None:
        self._f.flush()
        self._chunks.put(None)
        self._thread.join()
