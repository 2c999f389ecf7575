"""Telling a model that repeats itself from one that writes on (used by engine/agent/state.py's TextAccumulator).

A looping model writes the same stretch again and again until its length limit: the bundled SmolLM2-135M did
for 2,048 tokens (~75 s), and a remote model that loops costs money for every copy. The check runs on the last
TAIL_CHARS characters of a text part, each time the part's deltas are joined (every few dozen deltas, and at
every text checkpoint), never per delta: one `rfind` in a few KB of text.

A part repeats itself when its text ends with at least MIN_COPIES exact copies of one stretch, together at least
MIN_SPAN characters long. The copies need not start at a sentence: the tail of periodic text is periodic
wherever it is cut. Exact copies only: a numbered list or a table of numbers differs from line to line, and a
short repeat (a Markdown rule, three `pass` lines) stays under MIN_SPAN.
"""

from __future__ import annotations

TAIL_CHARS = 4096  # the end of a text part that is kept and checked
MIN_COPIES = 3
MIN_SPAN = 300  # characters the repeated copies must cover together
KEY = 24  # the last characters, looked up earlier in the tail to find the candidate periods
MAX_CANDIDATES = 32  # periods tried per check (the shortest first): bounds the work on text full of one pattern


def repeating(tail: str) -> bool:
    """Whether `tail` ends with MIN_COPIES or more copies of one stretch covering MIN_SPAN characters."""
    n = len(tail)
    if n < MIN_SPAN:
        return False
    key = tail[-KEY:]
    at = tail.rfind(key, 0, n - 1)
    for _ in range(MAX_CANDIDATES):
        if at < 0:
            return False
        period = n - KEY - at  # the key seen `period` characters earlier: the text may repeat with that period
        span = max(MIN_COPIES * period, MIN_SPAN)
        if span > n:
            return False  # later candidates have longer periods: none fits in the tail either
        # A stretch repeats with period p when it equals itself shifted by p.
        if tail[n - span : n - period] == tail[n - span + period :]:
            return True
        at = tail.rfind(key, 0, at + KEY - 1)
    return False
