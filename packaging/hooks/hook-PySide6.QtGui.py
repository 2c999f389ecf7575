# Replaces PyInstaller's hook for PySide6.QtGui: the same collection, minus the Qt plugins the app does not use.
# Filtering here, before PyInstaller resolves the plugins' library dependencies, also leaves out what only those
# plugins need (libQt6WaylandClient, the EGL/KMS integrations, GTK and its libraries, ...).
from pathlib import PurePath

from PyInstaller.utils.hooks.qt import add_qt6_dependencies

# plugin folder -> plugin files kept (any platform); folders not listed are left out whole. Wayland sessions run
# the app through XWayland: Qt falls back to xcb when its wayland plugin is missing.
KEEP = {
    "platforms": {
        "libqxcb.so", "libqoffscreen.so", "libqminimal.so",
        "qwindows.dll", "qoffscreen.dll", "qminimal.dll",
        "libqcocoa.dylib", "libqoffscreen.dylib", "libqminimal.dylib",
    },
    "platformthemes": {"libqxdgdesktopportal.so"},  # follows the desktop's dark mode, portal file dialogs
    "platforminputcontexts": {"libcomposeplatforminputcontextplugin.so", "libibusplatforminputcontextplugin.so"},
}


def _kept(src: str, dest: str) -> bool:
    parts = PurePath(dest).parts
    if "plugins" not in parts:
        return True
    folder = parts[parts.index("plugins") + 1]
    return PurePath(src).name in KEEP.get(folder, ())


hiddenimports, binaries, datas = add_qt6_dependencies(__file__)
binaries = [(src, dest) for src, dest in binaries if _kept(src, dest)]
