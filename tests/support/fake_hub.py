"""A loopback Hugging Face Hub for tests and benchmarks: the endpoints huggingface_hub 2.x calls to download
one file, and a CDN host on another port, as the real Hub has.

- Hub `HEAD|GET /{owner}/{repo}/resolve/{revision}/{file}`: `302` to the CDN with `X-Repo-Commit`,
  `X-Linked-Etag` (the LFS sha256), `X-Linked-Size` and an `ETag`; errors carry `X-Error-Code`
  (`RepoNotFound` 401, `GatedRepo` 401 without the right `Authorization`, `RevisionNotFound` 404,
  `EntryNotFound` 404), the headers `hf_raise_for_status` turns into typed errors.
- CDN `GET /blobs/{sha256}`: the bytes, with `Range: bytes=N-` answered `206` + `Content-Range`.
- Faults: `drop_after(n)` closes the connection after n bytes of the next body(ies); `throttle` (bytes/s)
  slows bodies down; `publish_sha256` publishes a wrong hash for a file.
- Every request is recorded as (host, method, path, headers) in `requests`.
- `refused_endpoint()`: an address where nothing listens, for a Hub that cannot be reached.

    with FakeHub() as hub:
        hub.add("org/repo", "model.gguf", data)
        os.environ["HF_ENDPOINT"] = hub.endpoint
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

COMMIT = "0123456789abcdef0123456789abcdef01234567"
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1 << 20


@dataclass
class HubFile:
    source: bytes | Path
    sha256: str  # the real one
    published: str  # what the Hub says it is
    gated: bool = False

    @property
    def size(self) -> int:
        return len(self.source) if isinstance(self.source, bytes) else self.source.stat().st_size


@dataclass
class Faults:
    drops: list[int] = field(default_factory=list)  # body bytes after which the next bodies are cut, in order
    throttle: float | None = None  # bytes per second


class FakeHub:
    def __init__(self, token: str = "hf_test_token"):
        self.token = token
        self.files: dict[tuple[str, str], HubFile] = {}
        self.blobs: dict[str, HubFile] = {}
        self.faults = Faults()
        self.requests: list[tuple[str, str, str, dict[str, str]]] = []
        self.drops_done = 0
        self._lock = threading.Lock()
        self._servers: list[ThreadingHTTPServer] = []

    # -- content --

    def add(self, repo: str, file: str, source: bytes | Path, *, publish_sha256: str | None = None,
            gated: bool = False) -> HubFile:
        digest = _sha256(source)
        entry = HubFile(source, digest, publish_sha256 or digest, gated)
        self.files[(repo, file)] = entry
        self.blobs[entry.published] = entry
        return entry

    def drop_after(self, *byte_counts: int) -> None:
        self.faults.drops.extend(byte_counts)

    def cdn_gets(self) -> list[dict[str, str]]:
        return [h for host, method, _p, h in self.requests if host == "cdn" and method == "GET"]

    # -- serving --

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, role))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, name=f"fake-{role}", daemon=True).start()
            self._servers.append(server)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next_drop(self) -> int | None:
        with self._lock:
            if not self.faults.drops:
                return None
            self.drops_done += 1
            return self.faults.drops.pop(0)


def _sha256(source: bytes | Path) -> str:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()
    h = hashlib.sha256()
    with open(source, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def _read(source: bytes | Path, start: int, end: int) -> bytes:
    if isinstance(source, bytes):
        return source[start:end]
    with open(source, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def _handler(hub: FakeHub, role: str):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _record(self) -> None:
            hub.requests.append((role, self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))

        def do_HEAD(self) -> None:
            self._record()
            self._resolve(body=False) if role == "hub" else self._error(405, None)

        def do_GET(self) -> None:
            self._record()
            self._resolve(body=True) if role == "hub" else self._blob()

        def _error(self, status: int, code: str | None, commit: str | None = None) -> None:
            self.send_response(status)
            if code:
                self.send_header("X-Error-Code", code)
            if commit:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _resolve(self, body: bool) -> None:
            m = _RESOLVE.match(unquote(self.path.split("?")[0]))
            if not m:
                return self._error(404, None)
            repo, revision, file = m.groups()
            if not any(r == repo for r, _f in hub.files):
                return self._error(401, "RepoNotFound")
            if revision not in ("main", COMMIT):
                return self._error(404, "RevisionNotFound")
            entry = hub.files.get((repo, file))
            if entry is None:
                return self._error(404, "EntryNotFound", COMMIT)
            if entry.gated and self.headers.get("Authorization") != f"Bearer {hub.token}":
                return self._error(401, "GatedRepo")
            self.send_response(302)
            self.send_header("Location", f"{hub.cdn}/blobs/{entry.published}?file={file}")
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Etag", f'"{entry.published}"')
            self.send_header("X-Linked-Size", str(entry.size))
            self.send_header("ETag", '"' + "1" * 40 + '"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _blob(self) -> None:
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            entry = hub.blobs.get(name)
            if entry is None:
                return self._error(404, None)
            size, start, status = entry.size, 0, 200
            if m := _RANGE.match(self.headers.get("Range", "")):
                start, status = int(m.group(1)), 206
                if start >= size:
                    return self._error(416, None)
            self.send_response(status)
            self.send_header("Content-Length", str(size - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{entry.sha256}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
            self.end_headers()
            self._send_body(entry, start, hub._next_drop())

        def _send_body(self, entry: HubFile, start: int, drop: int | None) -> None:
            end = entry.size if drop is None else min(entry.size, start + drop)
            throttle = hub.faults.throttle
            try:
                if isinstance(entry.source, Path) and throttle is None:
                    with open(entry.source, "rb") as f:
                        self.connection.sendfile(f, start, end - start)
                else:
                    step = CHUNK if throttle is None else max(4096, int(throttle / 20))
                    for at in range(start, end, step):
                        self.wfile.write(_read(entry.source, at, min(end, at + step)))
                        if throttle is not None:
                            time.sleep(step / throttle)
            except OSError:  # the client went away (a cancelled download)
                self.close_connection = True
                return
            if drop is not None and end < entry.size:  # cut the body short: the client sees a broken stream
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

    return Handler


def refused_endpoint() -> str:
    """A loopback address where nothing listens (a port bound, then closed): a connection to it is refused,
    as to a Hub that cannot be reached."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def tiny_gguf(path: Path, *, payload_bytes: int = 3 << 20, name: str = "tiny") -> Path:
    """A small but valid GGUF file (a header with an architecture and one tensor), written with `gguf`."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(4096)
    rng = np.random.default_rng(len(name) + payload_bytes)
    writer.add_tensor("weights", rng.integers(0, 255, size=payload_bytes, dtype=np.uint8).view(np.int8))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def env_with_hub(hub: FakeHub) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HUB_DISABLE_TELEMETRY": "1"}


def main() -> None:
    """Serve one file from a separate process: `python -m tests.support.fake_hub REPO FILE PATH [--drop N]
    [--throttle BYTES_PER_S]`;
    prints `READY <endpoint>`, serves until stdin closes, then prints the CDN GETs' Range headers."""
    import argparse
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("repo")
    parser.add_argument("file")
    parser.add_argument("path", type=Path)
    parser.add_argument("--drop", type=int, action="append", default=[], help="cut the next body after N bytes")
    parser.add_argument("--throttle", type=float, help="bytes per second")
    args = parser.parse_args()
    with FakeHub() as hub:
        hub.add(args.repo, args.file, args.path)
        hub.drop_after(*args.drop)
        hub.faults.throttle = args.throttle
        print(f"READY {hub.endpoint}", flush=True)
        sys.stdin.read()
        print("RANGES", json.dumps([h.get("range") for h in hub.cdn_gets()]), flush=True)


if __name__ == "__main__":
    main()
