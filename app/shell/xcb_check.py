"""Before the window, on Linux: are the libraries of Qt's X11 platform plugin (xcb) installed?

When one is missing, Qt (6.5 and later) says that "xcb-cursor0 or libxcb-cursor0 is needed", whichever library
it is, and aborts. A stock Debian 12 desktop has libxcb-cursor0 but lacks libxcb-icccm4 and libxcb-keysyms1, so
that message sends the person after a package they already have. This check loads the plugin the way Qt would
and, when that fails, names the missing libraries and the Debian packages that bring them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PLUGIN = "libqxcb.so"
# Debian names a library's package after its file (libxcb-icccm.so.4 -> libxcb-icccm4); these are the exceptions
# among what the plugin links.
PACKAGE_EXCEPTIONS = {"libglib-2.0": "libglib2.0-0", "libgthread-2.0": "libglib2.0-0", "libz": "zlib1g",
                      "libGLdispatch": "libglvnd0"}


def xcb_platform(env: dict[str, str], qt_args: list[str]) -> bool | None:
    """True when Qt will use xcb, None when it may (it tries Wayland first in a Wayland session), else False."""
    if sys.platform != "linux":
        return False
    if "-platform" in qt_args[:-1]:
        chosen = qt_args[qt_args.index("-platform") + 1]
    else:
        chosen = env.get("QT_QPA_PLATFORM", "")
    if chosen:  # "xcb", or a fallback list such as "wayland;xcb"
        first = chosen.split(";")[0].split(":")[0]
        return True if first == "xcb" else None if "xcb" in chosen else False
    if not env.get("DISPLAY"):  # no X server: xcb cannot work whatever is installed
        return False
    return None if env.get("WAYLAND_DISPLAY") else True


def plugin_paths(env: dict[str, str]) -> list[Path]:
    """The xcb plugins Qt may load, in the order it tries them: QT_QPA_PLATFORM_PLUGIN_PATH's first, then
    QT_PLUGIN_PATH's and its own plugin folder (it goes on to the next when one fails to load)."""
    from PySide6.QtCore import QLibraryInfo

    folders = [Path(p) for p in env.get("QT_QPA_PLATFORM_PLUGIN_PATH", "").split(os.pathsep) if p]
    folders += [Path(p) / "platforms" for p in env.get("QT_PLUGIN_PATH", "").split(os.pathsep) if p]
    folders.append(Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)) / "platforms")
    return [folder / PLUGIN for folder in folders if (folder / PLUGIN).is_file()]


def missing_libraries(plugin: Path) -> list[str]:
    """The libraries `plugin` needs that cannot be found, by file name; [] when it loads. Loading it here costs
    nothing extra: Qt gets the same, already loaded, library."""
    import ctypes

    try:
        ctypes.CDLL(str(plugin))
    except OSError as exc:
        first = str(exc).split(":")[0].strip()
        try:  # the loader stops at the first missing library; ldd lists them all
            out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        names = re.findall(r"^\s*(\S+) => not found", out, re.MULTILINE)
        return names or [Path(first).name]
    return []


def debian_package(library: str) -> str:
    """libxcb-icccm.so.4 -> libxcb-icccm4, libxkbcommon-x11.so.0 -> libxkbcommon-x11-0 (Debian's policy)."""
    match = re.fullmatch(r"(.+?)\.so\.(\d+)(?:\.[\d.]+)?", library)
    if match is None:
        return library
    name, version = match.groups()
    if name in PACKAGE_EXCEPTIONS:
        return PACKAGE_EXCEPTIONS[name]
    return f"{name}{'-' if name[-1].isdigit() else ''}{version}".lower()


def problem(env: dict[str, str], qt_args: list[str]) -> tuple[str, bool] | None:
    """(what to tell the person, whether the window certainly cannot open) when xcb's libraries are missing."""
    certain = xcb_platform(env, qt_args)
    if certain is False:
        return None
    missing: list[str] = []
    for plugin in plugin_paths(env):
        missing = missing_libraries(plugin)
        if not missing:
            return None
    if not missing:  # no xcb plugin at all: Qt says so itself
        return None
    packages = " ".join(dict.fromkeys(debian_package(name) for name in missing))
    libraries = ", ".join(missing)
    lead = "Hearth cannot open its window" if certain else "If Hearth's window does not open, this is why"
    return (f"{lead}: Qt's X11 platform (xcb) needs {libraries}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed.\nOn Debian or Ubuntu: sudo apt install {packages}", bool(certain))
