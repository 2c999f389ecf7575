"""A GGUF file's header, read directly (no llama.cpp): is it a GGUF, its architecture, name, training context
length and chat template.

Loading a file vocab-only through llama.cpp costs more and logs to stderr what `verbose=False` does not catch.
Reading stops as soon as the wanted keys are found; the large tokenizer arrays are skipped by seeking.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, BinaryIO

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, slots=True)
class GgufInfo:
    architecture: str | None
    name: str | None
    context_length: int | None
    chat_template: str | None


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: BinaryIO) -> str:
    return f.read(_read(f, "<Q")).decode("utf-8", "replace")


def _skip(f: BinaryIO, kind: int) -> None:
    if kind == _STRING:
        f.seek(_read(f, "<Q"), 1)
    elif kind == _ARRAY:
        inner, count = _read(f, "<I"), _read(f, "<Q")
        if inner in _SCALARS:
            f.seek(struct.calcsize(_SCALARS[inner]) * count, 1)
        else:
            for _ in range(count):
                _skip(f, inner)
    else:
        f.seek(struct.calcsize(_SCALARS[kind]), 1)


def read_gguf_info(path: str, *, template: bool = True) -> GgufInfo | None:
    """The header facts of a GGUF file, or None when the file is not a (readable) GGUF. `template=False` stops
    at the context length, before the tokenizer arrays."""
    values: dict[str, Any] = {}
    lengths: dict[str, int] = {}

    def done() -> bool:
        arch = values.get("general.architecture")
        has_length = arch is not None and f"{arch}.context_length" in lengths
        return has_length and "general.name" in values and (not template or "tokenizer.chat_template" in values)

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF" or _read(f, "<I") < 2:
                return None
            _read(f, "<Q")  # tensor count
            for _ in range(_read(f, "<Q")):
                key, kind = _string(f), _read(f, "<I")
                if kind == _STRING and key in ("general.architecture", "general.name", "tokenizer.chat_template"):
                    values[key] = _string(f)
                elif key.endswith(".context_length") and kind in _SCALARS:
                    lengths[key] = int(_read(f, _SCALARS[kind]))
                else:
                    _skip(f, kind)
                if done():
                    break
    except (OSError, ValueError, KeyError, struct.error, MemoryError):
        return None
    arch = values.get("general.architecture")
    length = lengths.get(f"{arch}.context_length") if arch else None
    return GgufInfo(
        architecture=arch,
        name=values.get("general.name"),
        context_length=length if length is not None else next(iter(lengths.values()), None),
        chat_template=values.get("tokenizer.chat_template"),
    )
