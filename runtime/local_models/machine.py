"""What this computer offers a local model: memory, physical cores, free disk space.

Read from the operating system without extra packages: `os.sysconf` for memory (Linux, macOS), `/proc/cpuinfo`
or `sysctl hw.physicalcpu` for physical cores, `shutil.disk_usage` for space. A value the platform does not
tell is None (memory) or the logical core count (cores), so callers never guess worse than the OS does.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path


@functools.cache
def total_ram_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


@functools.cache
def physical_cores() -> int:
    """Cores, not hardware threads: llama.cpp generation gains nothing from a core's second thread."""
    logical = os.cpu_count() or 1
    found = _linux_cores() if sys.platform.startswith("linux") else _mac_cores() if sys.platform == "darwin" else None
    return max(1, min(found or logical, logical))


def _linux_cores() -> int | None:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    cores: set[tuple[str, str]] = set()
    physical = core = None
    for line in [*text.splitlines(), ""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            physical = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip():
            if core is not None:
                cores.add((physical or "0", core))
            physical = core = None
    return len(cores) or None


def _mac_cores() -> int | None:
    try:
        out = subprocess.run(["sysctl", "-n", "hw.physicalcpu"], capture_output=True, text=True, timeout=2)
        return int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def free_disk_bytes(path: Path) -> int:
    """Free space on the volume that holds `path` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown size"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
