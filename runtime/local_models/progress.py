"""Download progress as a person reads it: bytes, speed, time left; reported from the download thread to the
event loop at most every REPORT_INTERVAL seconds (and at every phase change)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

REPORT_INTERVAL = 0.1
SPEED_WINDOW = 5.0  # seconds of samples the speed is averaged over


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    name: str  # the model's catalog id or file name
    phase: str  # checking | downloading | verifying | done
    done: int = 0  # bytes on disk, resumed part included
    total: int | None = None
    speed: float | None = None  # bytes per second over the last few seconds
    eta: float | None = None  # seconds left at that speed
    ram_needed: int | None = None
    fits: bool | None = None  # False: this computer has less memory than the model needs

    @property
    def fraction(self) -> float | None:
        return self.done / self.total if self.total else None


def format_progress(p: DownloadProgress) -> str:
    """One line for a terminal: `  42% 1.2 GB / 2.9 GB  35.2 MB/s  0:48 left`."""
    from .machine import human_bytes

    if p.phase == "checking":
        return f"{p.name}: asking the Hub…"
    if p.phase == "verifying":
        return f"{p.name}: verifying the checksum…"
    if p.phase == "done":
        return f"{p.name}: done, {human_bytes(p.total or p.done)}."
    pct = f"{p.fraction * 100:3.0f}% " if p.fraction is not None else ""
    total = f" / {human_bytes(p.total)}" if p.total else ""
    speed = f"  {human_bytes(p.speed)}/s" if p.speed else ""
    eta = f"  {int(p.eta) // 60}:{int(p.eta) % 60:02d} left" if p.eta is not None else ""
    return f"{p.name}: {pct}{human_bytes(p.done)}{total}{speed}{eta}"


class ProgressReporter:
    """Called in the download thread; hands snapshots to `on_progress` on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_progress: Callable[[DownloadProgress], None] | None,
                 name: str):
        self._loop, self._callback = loop, on_progress
        self.state = DownloadProgress(name=name, phase="checking")
        self._samples: deque[tuple[float, int]] = deque()
        self._last = 0.0

    def phase(self, phase: str, **changes: Any) -> None:  # fields of DownloadProgress
        self.state = replace(self.state, phase=phase, **changes)
        self._send()

    def bytes(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW:
            self._samples.popleft()
        t0, d0 = self._samples[0]
        speed = (done - d0) / (now - t0) if now > t0 and done > d0 else None
        total = total if total is not None else self.state.total
        eta = (total - done) / speed if speed and total else None
        phase = "verifying" if total is not None and done >= total else "downloading"
        self.state = replace(self.state, phase=phase, done=done, total=total, speed=speed, eta=eta)
        if phase != "downloading" or now - self._last >= REPORT_INTERVAL:
            self._last = now
            self._send()

    def _send(self) -> None:
        if self._callback is None:
            return
        state, callback = self.state, self._callback
        try:
            self._loop.call_soon_threadsafe(callback, state)
        except RuntimeError:  # the loop is closed: nobody watches any more
            self._callback = None
