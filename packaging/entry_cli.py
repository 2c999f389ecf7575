"""The frozen `hearth` executable (PyInstaller's script for the headless CLI; a console program on Windows)."""

import sys

from runtime.cli.main import main

sys.exit(main())
