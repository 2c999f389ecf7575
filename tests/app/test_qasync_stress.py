"""The qasync loop must survive long sessions. PySide6 6.12 on CPython 3.11 drops a reference to `True` per
Python `Signal.emit()` and one to `None` per Qt→Python slot call; short tests pass, and after a few thousand
loop iterations the interpreter aborts (hence the PySide6 pin in pyproject.toml). This drives ≥100,000 qasync
iterations with signals firing both ways and checks the reference counts of `True`/`None` stay put."""

from __future__ import annotations

import asyncio
import sys
import time

from PySide6.QtCore import QObject, QTimer, Signal

ITERATIONS = 100_000


class Pinger(QObject):
    ping = Signal(int)
    flag = Signal(bool)


async def test_qasync_survives_100k_iterations_with_signals():
    pinger = Pinger()
    got: list[int] = []
    flags = 0

    def on_flag(value: bool) -> None:
        nonlocal flags
        flags += value

    pinger.ping.connect(got.append)  # Qt → Python slot calls
    pinger.flag.connect(on_flag)
    ticks = 0

    def tick() -> None:
        nonlocal ticks
        ticks += 1

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(1)
    true_refs, none_refs = sys.getrefcount(True), sys.getrefcount(None)
    t0 = time.perf_counter()
    for i in range(ITERATIONS):
        pinger.ping.emit(i)  # Python → Qt emit
        pinger.flag.emit(True)
        await asyncio.sleep(0)  # one qasync loop iteration (a Qt timer event)
    elapsed = time.perf_counter() - t0
    timer.stop()

    assert len(got) == ITERATIONS and got[-1] == ITERATIONS - 1
    assert flags == ITERATIONS
    assert ticks > 0
    # On the broken pair these fall by one per emit/slot call; allow ordinary churn.
    assert sys.getrefcount(True) - true_refs > -1000
    assert sys.getrefcount(None) - none_refs > -1000
    assert elapsed < 60, f"{ITERATIONS} iterations took {elapsed:.1f} s"
