"""Entry point: `python -m app` and the `hearth-app` console script (`app.main:main`).

    hearth-app [--home DIR] [--no-tray] [--theme system|light|dark]

SIGTERM and SIGINT (logout, system shutdown, Ctrl-C) quit without asking, through the same clean path as
Quit: running turns end `interrupted`, the database is closed, the exit code is 0. A second launch on the same
data folder shows the running instance's window and exits (app/core/single.py).

Logging: see app/core/logs.py (a rotating file in the platform's log folder; stderr gets warnings, all with --verbose).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import sys
import time

from .core.logs import setup_logging

T0 = time.time()
log = logging.getLogger("app")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="hearth-app", description="Hearth, the desktop app.")
    parser.add_argument("--home", help="data folder (default: $HEARTH_HOME or the platform's user data folder)")
    parser.add_argument("--no-tray", action="store_true", help="do not show a tray icon")
    parser.add_argument("--theme", choices=("system", "light", "dark"), help="theme for this and later runs")
    parser.add_argument("--verbose", action="store_true")
    # For the launch benchmark and tests: print first-paint and ready times as one JSON line when ready;
    # "exit" then quits, "stay" keeps running (until Quit or a signal).
    parser.add_argument("--report-startup", choices=("exit", "stay"), help=argparse.SUPPRESS)
    return parser.parse_known_args(argv)


def _install_signals(loop: asyncio.AbstractEventLoop, quit_now) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, quit_now)
        except (NotImplementedError, RuntimeError, ValueError):  # Windows: plain handler
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(quit_now))


async def run(args: argparse.Namespace, instance) -> int:
    from .shell.application import HearthApp

    ctl = HearthApp(args.home, use_tray=not args.no_tray)
    # The report goes to a copy of stdout's descriptor: while llama.cpp loads a model (the background preload,
    # at any moment) llama-cpp-python points descriptors 1 and 2 at /dev/null, and a line printed then is lost.
    report_to = os.fdopen(os.dup(sys.stdout.fileno()), "w") if args.report_startup else None

    def show_again() -> None:
        ctl.show_main()
        if report_to is not None:
            print(json.dumps({"shown": time.time()}), file=report_to, flush=True)

    instance.show_requested.connect(show_again)
    if args.theme:
        ctl.prefs.theme = args.theme
    _install_signals(asyncio.get_running_loop(), lambda: ctl.request_quit(ask=False))
    report: dict = {}

    def painted() -> None:
        report["first_paint"] = time.time()
        report["heavy_at_paint"] = sorted(m for m in ("runtime.api", "openai", "mcp", "llama_cpp")
                                          if m in sys.modules)

    try:
        if args.report_startup:
            ctl.show_main().painted.connect(painted)
        await ctl.start()
        # Everything built so far (Qt, pydantic, SQLAlchemy, openai's modules) lives as long as the app: move it
        # out of the collector's sight. A full collection then costs ~0 ms instead of 100-150 ms with a long
        # task open (tests/benchmarks/bench_app.py (f)), so it never stalls a frame.
        gc.freeze()
        if args.report_startup:
            report["ready"] = time.time()
            report["t0"] = T0
            report["error"] = ctl.startup_error
            report["tasks"] = sorted(ctl.window.tasks) if ctl.window is not None else []
            print(json.dumps(report), file=report_to, flush=True)
            if args.report_startup == "exit":
                ctl.request_quit(ask=False)
        await ctl.quit_event.wait()
    finally:
        instance.close()
        await ctl.shutdown()
        if report_to is not None:
            report_to.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args, qt_args = parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.verbose, args.home)
    from .widgets.dialogs import app_version

    log.info("Hearth %s starting%s", app_version(), " (installed build)" if getattr(sys, "frozen", False) else "")
    import qasync
    from PySide6.QtWidgets import QApplication

    from .core.single import InstanceServer, hand_over, server_name
    from .shell import xcb_check
    from .widgets.icons import app_icon

    if QApplication.instance() is None and (found := xcb_check.problem(dict(os.environ), qt_args)) is not None:
        text, certain = found
        print(text, file=sys.stderr)
        log.info("before the window: %s", text)  # the log file (stderr has it already)
        if certain:
            return 1
    existing = QApplication.instance()  # a test's; the stubs say QCoreApplication
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0], *qt_args])
    name = server_name(args.home)
    if hand_over(name):  # Hearth already runs on this data folder: it shows its window instead
        return 0
    instance = InstanceServer(name)
    app.setApplicationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    app.setDesktopFileName("hearth")
    app.setWindowIcon(app_icon())
    app.setQuitOnLastWindowClosed(False)  # windows are viewers; Quit is explicit (shell/application.py)
    return qasync.run(run(args, instance))


if __name__ == "__main__":
    sys.exit(main())
