"""Recording a turn's workspace changes (issue 32) on a workspace of 10,000 files and 1 GB: the walk before the
turn's first changing call (stats and open descriptors), the walk after it (hash and keep only what changed), and
the disk the blob store takes. Goals: both walks together <= 200 ms, and no copy of an unchanged file (the store
holds exactly the changed files' contents).

    .venv/bin/python tests/benchmarks/bench_changes.py [--rounds 5]

The 1 GB is four 256 MB files of real (not sparse) data beside 9,996 small files in 100 folders, in a temporary
folder deleted afterwards. Each round's "turn" replaces 5 small files (as file tools do: a rename), rewrites 1 in
place, deletes 2, creates 3, and leaves everything else alone. The page cache is warm (the files were just
written), as it is for a workspace a task works in.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from runtime.tools.changes import BlobStore, Watch  # noqa: E402

GOAL_MS = 200.0
BIG_FILES, BIG_SIZE = 4, 256 * 1024 * 1024
SMALL_FILES = 10_000 - BIG_FILES


def _fill(ws: Path) -> None:
    block = os.urandom(1024 * 1024)
    for n in range(BIG_FILES):
        with open(ws / f"big{n}.bin", "wb") as f:
            for _ in range(BIG_SIZE // len(block)):
                f.write(block)
    for n in range(SMALL_FILES):
        folder = ws / f"d{n % 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{n}.txt").write_text(f"file {n}\n" * 20)


def _turn(ws: Path, r: int) -> int:
    """A turn's changes; returns the bytes a store must keep for them (earlier contents, and new ones)."""
    kept = 0
    for n in range(5):  # replaced, as file tools write: a temporary file and a rename
        path = ws / f"d{n}" / f"f{n + 100 * r}.txt"
        kept += path.stat().st_size
        temp = path.with_suffix(".new")
        temp.write_text(f"round {r} rewrote file {n}\n")
        os.replace(temp, path)
        kept += path.stat().st_size
    in_place = ws / "d10" / f"f{10 + 100 * r}.txt"
    in_place.write_text("rewritten in place\n")  # its earlier content cannot be kept: only the new one is
    kept += in_place.stat().st_size
    for n in range(2):
        gone = ws / f"d{20 + n}" / f"f{20 + n + 100 * r}.txt"
        kept += gone.stat().st_size
        gone.unlink()
    for n in range(3):
        made = ws / f"new{r}-{n}.txt"
        made.write_text(f"new file {n} of round {r}\n")
        kept += made.stat().st_size
    return kept


def _disk(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws, store = Path(tmp) / "workspace", Path(tmp) / "changes"
        ws.mkdir()
        t0 = time.perf_counter()
        _fill(ws)
        files = sum(1 for p in ws.rglob("*") if p.is_file())
        print(f"workspace: {files:,} files, {_bytes(ws) / 1e9:.2f} GB (made in {time.perf_counter() - t0:.1f} s)")
        blobs = BlobStore(store)
        before_ms, after_ms, expected = [], [], 0
        for r in range(rounds):
            watch = Watch(ws)
            t0 = time.perf_counter()
            watch.take()
            before_ms.append((time.perf_counter() - t0) * 1000)
            expected += _turn(ws, r)
            t0 = time.perf_counter()
            found = watch.changes(blobs)
            after_ms.append((time.perf_counter() - t0) * 1000)
            assert len(found) == 11, found
        kept = _bytes(store)
        print(f"rounds: {rounds}, load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        both = [b + a for b, a in zip(before_ms, after_ms, strict=True)]
        for name, times in (("walk before the first change", before_ms), ("walk after the turn", after_ms),
                            ("a turn's recording, in all", both)):
            print(f"{name:<30} median {statistics.median(times):6.1f} ms, max {max(times):6.1f} ms   "
                  f"(goal <= {GOAL_MS:.0f} ms)")
        print(f"blob store: {kept:,} bytes of content ({_disk(store):,} on disk in blocks), the changed files' "
              f"contents: {expected:,} bytes   (goal: no copy of unchanged files, i.e. <= {expected:,})")
        print(f"unchanged bytes copied: {max(0, kept - expected):,}   (goal: 0)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    main(parser.parse_args().rounds)
