"""Downloads that were started and not finished: `models/downloads.json`, so a paused download (Pause, closing
Settings, a quit, a crash) is still listed, with how far it got, when the person comes back to it.

Decisions:
- An entry is written when the download knows where its partial file goes (after the Hub's metadata) and lives
  exactly as long as that file: `entries()` drops the ones whose partial file is gone (finished, cancelled, a
  wrong checksum deleted it, the person deleted it).
- `ref` is what `rt.models.pull` resumes it with: the catalog id, else `OWNER/REPO/FILE.gguf` (or the file's URL
  for a revision other than main). `key` is the download's identity (`repo/file`), as in `rt.models.pull`.
- Writes replace the file atomically under a lock (downloads note themselves from worker threads); a damaged
  index is treated as empty: it only lists what the partial files on disk already hold.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError


class PartialDownload(BaseModel):
    model_config = ConfigDict(extra="ignore")

    key: str
    ref: str
    label: str
    partial: str  # the partial file, relative to the data folder
    total: int | None
    started_at: float = 0.0


class PartialDownloads:
    def __init__(self, home: Path):
        self.home = Path(home)
        self._index = self.home / "models" / "downloads.json"
        self._mutex = threading.Lock()

    def note(self, entry: PartialDownload) -> None:
        with self._mutex:
            kept = [e for e in self._read() if e.key != entry.key]
            self._write([*kept, entry.model_copy(update={"started_at": entry.started_at or time.time()})])

    def drop(self, key: str) -> None:
        with self._mutex:
            entries = self._read()
            if any(e.key == key for e in entries):
                self._write([e for e in entries if e.key != key])

    def discard(self, key: str) -> bool:
        """Delete a paused download's partial file and forget it; False when there is none."""
        entry = next((e for e in self._read() if e.key == key), None)
        if entry is None:
            return False
        (self.home / entry.partial).unlink(missing_ok=True)
        self.drop(key)
        return True

    def entries(self, skip: Collection[str] = frozenset()) -> list[tuple[PartialDownload, int]]:
        """Each unfinished download with the bytes its partial file holds, oldest first; `skip`: the keys of
        running downloads (their partial file may not exist yet)."""
        found, gone = [], []
        for entry in self._read():
            if entry.key in skip:
                continue
            try:
                found.append((entry, (self.home / entry.partial).stat().st_size))
            except OSError:
                gone.append(entry.key)
        for key in gone:
            self.drop(key)
        return found

    def _read(self) -> list[PartialDownload]:
        try:
            data = json.loads(self._index.read_text(encoding="utf-8"))
            return [PartialDownload.model_validate(e) for e in data.get("downloads", [])]
        except (OSError, ValueError, ValidationError, AttributeError):
            return []

    def _write(self, entries: list[PartialDownload]) -> None:
        self._index.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._index.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"downloads": [e.model_dump() for e in entries]}, indent=2) + "\n",
                       encoding="utf-8")
        os.replace(tmp, self._index)
