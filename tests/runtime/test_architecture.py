"""runtime/ARCHITECTURE.md stays true: its layer diagram names every runtime package and module on disk, only
those, in the order pyproject.toml's layers contract enforces; its map names every package."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"


def _section(title: str) -> str:
    text = (RUNTIME / "ARCHITECTURE.md").read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def _diagram() -> list[set[str]]:
    """The layers of the first code block under "Layers", top first; each a set of names."""
    block = _section("Layers").split("```")[1]
    return [set(re.findall(r"[a-z_]+", line)) for line in block.strip().splitlines()]


def _on_disk() -> set[str]:
    packages = {p.parent.name for p in RUNTIME.glob("*/__init__.py")}
    modules = {p.stem for p in RUNTIME.glob("*.py") if p.stem != "__init__"}
    return packages | modules


def _contract() -> list[set[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [layers] = [c for c in config["tool"]["importlinter"]["contracts"] if c.get("containers") == ["runtime"]]
    return [set(re.findall(r"[a-z_]+", layer)) for layer in layers["layers"]]


def test_the_layer_diagram_names_every_runtime_package_and_module_and_only_those():
    named = set().union(*_diagram())
    assert named - _on_disk() == set(), "named in ARCHITECTURE.md's layers but not in runtime/"
    assert _on_disk() - named == set(), "in runtime/ but not in ARCHITECTURE.md's layers"


def test_the_layer_diagram_is_the_layers_contract():
    assert _diagram() == _contract()


def test_the_map_names_every_package():
    tree = _section("Map").split("```")[1]
    packages = {p.parent.relative_to(RUNTIME).as_posix() for p in RUNTIME.glob("**/__init__.py")}
    packages -= {"."}
    missing = {p for p in packages if f"{p.rsplit('/', 1)[-1]}/" not in tree}
    assert missing == set(), "packages the map does not name"
