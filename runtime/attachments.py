"""What the model reads of an attached file: its text, up to a budget.

Text files (txt, md, csv, json, code: anything that decodes as UTF-8 and holds no NUL) and PDFs (through pypdf)
give their text; other files (images, archives, binaries) give none. The excerpt is taken when the file is
attached and stored with the message, so a rebuilt model input is the same as the first one even if a tool
later changes the file. The whole file always stays in the workspace, readable with `read_file`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SNIFF_BYTES = 8192
PDF_PAGES = 200  # pages read at most for an excerpt; the budget usually ends it much earlier


@dataclass(frozen=True)
class Excerpt:
    text: str
    total_chars: int | None  # of the whole text when known; None when reading stopped at the budget
    kind: str  # "text" | "pdf"

    @property
    def cut(self) -> bool:
        return self.total_chars is None or self.total_chars > len(self.text)


def excerpt(path: Path, budget_chars: int) -> Excerpt | None:
    """The file's text cut to `budget_chars`, or None when it has no text a model can read."""
    try:
        if path.suffix.lower() == ".pdf":
            return _pdf(path, budget_chars)
        with path.open("rb") as f:
            head = f.read(SNIFF_BYTES)
            if b"\x00" in head:
                return None
            data = head + f.read(max(0, budget_chars * 4 - len(head)))  # UTF-8: at most 4 bytes a character
            more = bool(f.read(1))
    except OSError as exc:
        log.info("could not read attachment %s: %s", path.name, exc)
        return None
    text = _decode(data, more)
    if text is None:
        return None
    if len(text) > budget_chars:
        return Excerpt(text[:budget_chars], None, "text")
    return Excerpt(text, None if more else len(text), "text")


def _decode(data: bytes, more: bool) -> str | None:
    """UTF-8 text, or None for a file that is not text."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if more and exc.start >= len(data) - 3:  # only a character cut by the read limit
            return data[: exc.start].decode("utf-8")
        return None


def _pdf(path: Path, budget_chars: int) -> Excerpt | None:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted:
            return None
        pieces, size = [], 0
        for page in reader.pages[:PDF_PAGES]:
            text = page.extract_text() or ""
            pieces.append(text)
            size += len(text)
            if size >= budget_chars:
                break
    except (PdfReadError, OSError, ValueError) as exc:
        log.info("could not read PDF %s: %s", path.name, exc)
        return None
    text = "\n\n".join(pieces).strip()
    if not text:
        return None
    complete = size < budget_chars and len(reader.pages) <= PDF_PAGES
    return Excerpt(text[:budget_chars], len(text) if complete else None, "pdf")
