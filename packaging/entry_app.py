"""The frozen `hearth-app` executable (PyInstaller's script for the desktop app)."""

import sys

from app.main import main

sys.exit(main())
