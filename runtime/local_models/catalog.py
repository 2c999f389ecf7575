"""The catalog of downloadable models: `catalog.json`, shipped with Hearth (a data file, not code).

Each entry names a Hugging Face repository and file, and what a person needs to choose: size, context length,
memory needed and tool-call format. Values that cannot be verified offline (exact size, sha256) stay empty in
the file and come from the Hub's metadata at download time (see `catalog.json`'s `_about`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from pydantic import BaseModel, ConfigDict

from .machine import total_ram_bytes

GB = 1_000_000_000
# A model outside the catalog: its file, plus the KV cache and buffers, taken as a quarter more plus 0.5 GB.
UNKNOWN_RAM_FACTOR = 1.25
UNKNOWN_RAM_EXTRA = 0.5 * GB


class CatalogEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    label: str
    params: str
    repo: str
    file: str
    revision: str = "main"
    approx_size_gb: float | None = None
    size_bytes: int | None = None
    sha256: str = ""
    context_length: int
    ram_gb: float
    tool_format: str
    license: str = ""
    summary: str = ""
    calls_tools: bool = True  # False: cannot call tools reliably, so it is offered none (an answer is all it gives)
    sampling: dict[str, float] = {}  # what the model's makers recommend: temperature, top_p, repeat_penalty
    sampling_source: str = ""

    @property
    def size(self) -> int | None:
        """Exact bytes when known, else the Hub listing's rounded size."""
        if self.size_bytes is not None:
            return self.size_bytes
        return int(self.approx_size_gb * GB) if self.approx_size_gb is not None else None

    @property
    def ram_bytes(self) -> int:
        return int(self.ram_gb * GB)


@functools.cache
def _catalog() -> dict:
    return json.loads(resources.files(__package__).joinpath("catalog.json").read_text(encoding="utf-8"))


@functools.cache
def load_catalog() -> tuple[CatalogEntry, ...]:
    """The models that can be downloaded."""
    return tuple(CatalogEntry.model_validate(m) for m in _catalog()["models"])


@functools.cache
def bundled_entry() -> CatalogEntry:
    """The model that ships inside Hearth, described as the catalog describes the others."""
    return CatalogEntry.model_validate(_catalog()["bundled"])


def catalog_entry(model_id: str) -> CatalogEntry | None:
    return next((e for e in load_catalog() if e.id == model_id), None)


def catalog_entry_for_file(repo: str, file: str) -> CatalogEntry | None:
    return next((e for e in load_catalog() if e.repo.lower() == repo.lower() and e.file == file), None)


def estimated_ram_bytes(size: int | None) -> int | None:
    """Memory a model outside the catalog needs, from its file size (None when the size is unknown)."""
    return int(size * UNKNOWN_RAM_FACTOR + UNKNOWN_RAM_EXTRA) if size else None


def best_fit() -> CatalogEntry | None:
    """The catalog model to suggest for this computer: the biggest whose memory need is at most half of its memory
    (the rest for the system and the person's programs), else the smallest that fits at all; with the memory
    unknown, the smallest. None when none fits."""
    models = sorted(load_catalog(), key=lambda e: e.ram_bytes)
    total = total_ram_bytes()
    if total is None:
        return models[0] if models else None
    roomy = [e for e in models if e.ram_bytes <= total // 2]
    return roomy[-1] if roomy else next((e for e in models if e.ram_bytes <= total), None)


def fits_in_ram(needed: int | None) -> bool | None:
    """False when this computer has less memory than `needed`; None when either is unknown."""
    total = total_ram_bytes()
    if needed is None or total is None:
        return None
    return needed <= total
