"""The bundled GGUF added as a person's own local model (Settings ▸ Models ▸ Add a .gguf file): the catalog does not
know the added file, so unlike the bundled model it is offered tools, and its prompt prefix is warmed and cached.
The tests of the prompt-prefix cache and the preload use it as the small local model that calls tools."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.local_models.library import ModelLibrary, ModelRecord
from runtime.providers.llama.models import bundled_model_path, bundled_model_sha256


def add_bundled_file(home: Path, *, default: bool = True) -> str:
    """Add the bundled GGUF to `home`'s models under a name of its own; returns its model reference, made the
    default model (settings.json) unless `default` is False."""
    file = bundled_model_path()
    record = ModelLibrary(home).add(ModelRecord(name="smollm2-added", source="local", path=str(file),
                                                size=file.stat().st_size, sha256=bundled_model_sha256() or ""))
    ref = f"builtin/{record.name}"
    if default:
        (home / "settings.json").write_text(json.dumps({"default_model": ref}))
    return ref
