"""The window on Qt's X11 platform (xcb), on a real X server (Xvfb): it opens, and when a library of the xcb
plugin is missing the app names it and its Debian package instead of Qt's "xcb-cursor0 is needed" and an abort.

The missing libraries are real: a copy of PySide6 (symlinks to this one) whose xcb plugin is patched with
patchelf to need libxcb-icccm.so.99 and libxcb-keysyms.so.98, which exist nowhere; Python imports that copy first.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.shell.xcb_check import debian_package, xcb_platform

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def display():
    """A private Xvfb; its DISPLAY."""
    read, write = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-nolisten", "tcp", "-screen", "0", "1024x768x24"],
                            pass_fds=(write,), stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read) as f:
        number = f.readline().strip()
    assert number, "Xvfb did not start"
    yield f":{number}"
    xvfb.terminate()
    xvfb.wait(timeout=10)


@pytest.fixture(scope="module")
def broken_pyside(tmp_path_factory) -> Path:
    """A folder whose PySide6 is this one, except for an xcb plugin that needs two libraries nobody has."""
    import PySide6

    real = Path(PySide6.__file__).resolve().parent
    top = tmp_path_factory.mktemp("broken-xcb")
    copy = top / "PySide6"
    # Symlink everything, one level deeper along the way to the plugin, which is copied and patched.
    along = ["Qt", "plugins", "platforms"]
    here, there = copy, real
    for step in [*along, None]:
        here.mkdir()
        for entry in there.iterdir():
            if entry.name not in (step, "libqxcb.so"):
                (here / entry.name).symlink_to(entry)
        if step is not None:
            here, there = here / step, there / step
    plugin = here / "libqxcb.so"
    shutil.copy2(there / "libqxcb.so", plugin)
    subprocess.run(["patchelf", "--replace-needed", "libxcb-icccm.so.4", "libxcb-icccm.so.99",
                    "--replace-needed", "libxcb-keysyms.so.1", "libxcb-keysyms.so.98", str(plugin)], check=True)
    return top


def _start(home: Path, display: str, pythonpath: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="xcb", DISPLAY=display, PYTHONPATH=pythonpath)
    for name in ("HEARTH_HOME", "WAYLAND_DISPLAY", "QT_PLUGIN_PATH", "QT_QPA_PLATFORM_PLUGIN_PATH"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "app", "--home", str(home), "--no-tray", "--report-startup", "exit"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env)


def test_the_window_opens_on_xcb(tmp_path, display):
    done = _start(tmp_path, display, str(ROOT))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["error"] is None


def test_missing_xcb_libraries_are_named_with_their_packages(tmp_path, display, broken_pyside):
    done = _start(tmp_path, display, os.pathsep.join([str(broken_pyside), str(ROOT)]))
    assert done.returncode == 1, done.stderr  # not Qt's abort (-6)
    assert done.stderr == ("Hearth cannot open its window: Qt's X11 platform (xcb) needs libxcb-icccm.so.99, "
                           "libxcb-keysyms.so.98, which are not installed.\n"
                           "On Debian or Ubuntu: sudo apt install libxcb-icccm99 libxcb-keysyms98\n")
    assert "sudo apt install libxcb-icccm99" in (tmp_path / "logs" / "hearth.log").read_text()
    assert not (tmp_path / "hearth.sqlite3").exists()  # it stopped before anything else


def _needed(library: Path) -> list[str]:
    out = subprocess.run(["objdump", "-p", str(library)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^\s*NEEDED\s+(\S+)", out, re.MULTILINE)


def test_the_readme_lists_every_library_the_window_links():
    """The README's apt line (what .ci/run installs, and then starts the window with) names the package of
    every library that the xcb plugin and the Qt libraries it loads link, but Qt's own and the C/C++ runtime."""
    import PySide6

    qt = Path(PySide6.__file__).resolve().parent / "Qt"
    seen: set[str] = set()
    todo = [qt / "plugins" / "platforms" / "libqxcb.so", qt / "lib" / "libQt6Widgets.so.6"]
    while todo:
        for name in _needed(todo.pop()):
            if name not in seen and name.startswith("libQt6"):
                todo.append(qt / "lib" / name)
            seen.add(name)
    base = re.compile(r"(libQt6.*|libicu.*|libc|libm|libstdc\+\+|libgcc_s|ld-linux.*|libz|libzstd)\.so.*")
    wanted = {debian_package(name) for name in seen if not base.fullmatch(name)}
    line = re.search(r"^## Run$.*?^sudo apt-get install (.+)$", (ROOT / "README.md").read_text(),
                     re.MULTILINE | re.DOTALL)
    assert line is not None
    assert "libxcb-icccm4" in wanted and wanted - set(line.group(1).split()) == set()


def test_debian_package_names():
    assert [debian_package(n) for n in ("libxcb-icccm.so.4", "libxkbcommon-x11.so.0", "libX11-xcb.so.1",
                                        "libX11.so.6", "libglib-2.0.so.0", "libxcb.so.1.1.0")] == [
        "libxcb-icccm4", "libxkbcommon-x11-0", "libx11-xcb1", "libx11-6", "libglib2.0-0", "libxcb1"]


def test_when_qt_uses_xcb():
    x11 = {"DISPLAY": ":0"}
    assert xcb_platform(x11, []) is True
    assert xcb_platform({**x11, "QT_QPA_PLATFORM": "offscreen"}, []) is False
    assert xcb_platform({**x11, "QT_QPA_PLATFORM": "xcb"}, []) is True
    assert xcb_platform({"QT_QPA_PLATFORM": "offscreen"}, ["-platform", "xcb"]) is True
    assert xcb_platform({}, []) is False  # no X server: nothing to check
    # A Wayland session tries Wayland first: xcb only may be used.
    assert xcb_platform({**x11, "WAYLAND_DISPLAY": "wayland-0"}, []) is None
    assert xcb_platform({**x11, "QT_QPA_PLATFORM": "wayland;xcb"}, []) is None

