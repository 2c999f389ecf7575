"""The app's preferences (theme, drafts, geometry) live in the data folder, also when it is the default one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from app.shell.application import HearthApp


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Qt's per-user settings location and the platform's data folder, moved into the test's folder."""
    fmt, scope = QSettings.Format.NativeFormat, QSettings.Scope.UserScope
    before = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    QSettings.setPath(fmt, scope, str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("HEARTH_HOME", raising=False)
    yield
    QSettings.setPath(fmt, scope, before)


def test_prefs_live_in_the_default_data_folder_and_earlier_ones_are_carried_over(tmp_path, isolated):
    earlier = QSettings("Hearth", "Hearth")  # where a version before this one kept them
    earlier.setValue("theme", "dark")
    earlier.setValue("drafts", '{"t1": {"text": "half a thought"}}')
    earlier.sync()

    ctl = HearthApp(use_tray=False)
    ini = tmp_path / "data" / "Hearth" / "app.ini"
    assert ctl.prefs.theme == "dark" and ctl.drafts == {"t1": {"text": "half a thought"}}
    ctl.prefs.theme = "light"
    ctl.prefs.save()
    assert ini.is_file() and "light" in ini.read_text()

    # Carried over once: the data folder's file wins from then on.
    again = HearthApp(use_tray=False)
    assert again.prefs.theme == "light"


def test_a_chosen_data_folder_keeps_its_own_prefs(tmp_path, isolated):
    earlier = QSettings("Hearth", "Hearth")
    earlier.setValue("theme", "dark")
    earlier.sync()
    ctl = HearthApp(tmp_path / "elsewhere", use_tray=False)
    assert ctl.prefs.theme == "system"  # another data folder: nothing of the default one's
    ctl.prefs.theme = "light"
    ctl.prefs.save()
    assert (tmp_path / "elsewhere" / "app.ini").is_file()
