"""The installed local models of a data folder: `models/library.json`, the downloaded files under `models/hub/`
(huggingface_hub's cache layout, see local_models/hub.py), and GGUF files the person added from elsewhere.

Decisions:
- A model is known by a short name, unique in the folder, used in model references (`builtin/<name>`): the
  catalog id for catalog models, else the file name's stem in lower case (`-2`, `-3` … on a clash). The
  bundled model's name is reserved.
- Downloaded files are recorded relative to the data folder (the folder can move); added files by absolute path.
  An added file stays where it is: removing it from Hearth never deletes it (it is the person's file).
- Each record keeps the file's sha256 (the Hub's, verified; or computed when a file is added): the file's
  identity for the prompt-prefix cache (providers/llama/prefix.py).
- The index is small and read on every lookup, so a model pulled by `hearth models pull` shows up in a running
  provider without a restart; writes replace the file atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import ModelError
from .partials import PartialDownloads

BUNDLED_MODEL_NAME = "smollm2-135m"


class ModelRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    source: Literal["hub", "local"]
    path: str  # relative to the data folder for downloads, absolute for added files
    size: int
    sha256: str = ""
    repo: str | None = None
    file: str | None = None
    revision: str | None = None
    commit: str | None = None
    catalog_id: str | None = None
    added_at: float = 0.0


def model_name_for(file_name: str) -> str:
    stem = Path(file_name).name.removesuffix(".gguf").removesuffix(".GGUF")
    return re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._") or "model"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


class ModelLibrary:
    def __init__(self, home: Path):
        self.home = Path(home)
        self.root = self.home / "models"
        self.hub_cache = self.root / "hub"
        self.kv_cache = self.home / "cache" / "kv-prefix"
        self._index = self.root / "library.json"
        self._mutex = threading.Lock()
        self.partials = PartialDownloads(self.home)  # downloads started and not finished

    def records(self) -> list[ModelRecord]:
        try:
            data = json.loads(self._index.read_text(encoding="utf-8"))
            return [ModelRecord.model_validate(r) for r in data.get("models", [])]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, ValidationError, AttributeError) as exc:
            raise ModelError(f"{self._index} is damaged ({type(exc).__name__}); move it away to start over.") from None

    def get(self, name: str) -> ModelRecord | None:
        return next((r for r in self.records() if r.name == name), None)

    def find_download(self, repo: str, file: str) -> ModelRecord | None:
        return next((r for r in self.records() if r.repo == repo and r.file == file and r.source == "hub"), None)

    def find_path(self, path: Path) -> ModelRecord | None:
        return next((r for r in self.records() if self.path(r) == path), None)

    def path(self, record: ModelRecord) -> Path:
        return Path(record.path) if record.source == "local" else self.home / record.path

    def relative(self, path: Path) -> str:
        return str(Path(path).relative_to(self.home))

    def add(self, record: ModelRecord) -> ModelRecord:
        """Record a model under its name, or the next free variant of it; returns the stored record."""
        with self._mutex:
            records = self.records()
            taken = {r.name for r in records} | {BUNDLED_MODEL_NAME}
            name, n = record.name, 2
            while name in taken:
                name, n = f"{record.name}-{n}", n + 1
            stored = record.model_copy(update={"name": name, "added_at": record.added_at or time.time()})
            self._write([*records, stored])
        return stored

    def remove(self, name: str) -> ModelRecord:
        with self._mutex:
            records = self.records()
            record = next((r for r in records if r.name == name), None)
            if record is None:
                raise ModelError(f"No installed model is named {name!r}; `hearth models list` shows them.")
            self._write([r for r in records if r.name != name])
        return record

    def _write(self, records: list[ModelRecord]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._index.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"models": [r.model_dump() for r in records]}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self._index)
